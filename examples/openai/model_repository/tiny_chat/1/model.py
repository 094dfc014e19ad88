"""tiny_chat: a decoupled Python model that streams an answer word by word, with no weights to download.

The answer is the words of the last `[user]` line of the prompt (the whole prompt where it has none),
one word per response. `max_tokens` (a request parameter) makes it cycle through them up to that many
words, finishing with "length"; `stop` (a JSON list) ends the answer before a word it names. With
`tools` given (and `tool_choice` not "none"), it calls the first tool instead, with the words as its
argument. Each response carries the word's logprob, made up but deterministic.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _answer_words(prompt):
    lines = [line[len("[user]") :] for line in prompt.splitlines() if line.startswith("[user]")]
    return (lines[-1] if lines else prompt).split()


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            self._answer(request)
        return None

    def _answer(self, request):
        sender = request.get_response_sender()
        try:
            parameters = json.loads(request.parameters() or "{}")
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0]
            words = _answer_words(prompt.decode("utf-8", "replace")) or ["..."]
            tools = json.loads(parameters["tools"]) if "tools" in parameters else []
            if tools and parameters.get("tool_choice") != "none":
                call = {
                    "name": tools[0]["function"]["name"],
                    "arguments": json.dumps({"text": " ".join(words)}),
                }
                tensor = pb_utils.Tensor(
                    "tool_calls", np.array([json.dumps([call]).encode()], dtype=np.object_)
                )
                sender.send(
                    pb_utils.InferenceResponse(output_tensors=[tensor]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                return
            count = int(parameters["max_tokens"]) if "max_tokens" in parameters else len(words)
            stop = set(json.loads(parameters["stop"])) if "stop" in parameters else set()
            finish = "length" if "max_tokens" in parameters else "stop"
            for index in range(count):
                if request.is_cancelled():  # the client went away: no more words
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    return
                word = words[index % len(words)]
                if word in stop:
                    finish = "stop"
                    break
                sender.send(self._response(word if index == 0 else " " + word, None, -0.01 * (index + 1)))
            sender.send(self._response("", finish, None), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as exc:  # a bad parameter: the stream ends with the error
            sender.send(
                pb_utils.InferenceResponse(error=pb_utils.TritonError(f"tiny_chat: {exc}")),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )

    @staticmethod
    def _response(text, finish, logprob):
        tensors = [pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))]
        if finish is not None:
            tensors.append(pb_utils.Tensor("finish_reason", np.array([finish.encode()], dtype=np.object_)))
        if logprob is not None:
            tensors.append(pb_utils.Tensor("logprobs", np.array([logprob], dtype=np.float32)))
        return pb_utils.InferenceResponse(output_tensors=tensors)
