"""A non-decoupled INT32 model behind the decoupled-ensemble tests; the `operation` config parameter picks
what it does. times_ten: OUTPUT0 = INPUT0 * 10 (an INPUT0 above 1000 fails the request with "too large").
add: SUM = A + B. With the request parameter "send": true, the answers go through response senders
(one response each, with the final flag) and execute returns None, as a model that is not decoupled may."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.operation = json.loads(args["model_config"])["parameters"]["operation"]["string_value"]

    def execute(self, requests):
        answers = [self._answer(request) for request in requests]
        if not all(json.loads(request.parameters()).get("send", False) for request in requests):
            return answers
        for request, answer in zip(requests, answers, strict=True):
            request.get_response_sender().send(answer, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def _answer(self, request):
        def tensor(name):
            return pb_utils.get_input_tensor_by_name(request, name).as_numpy()

        if self.operation == "add":
            return pb_utils.InferenceResponse([pb_utils.Tensor("SUM", tensor("A") + tensor("B"))])
        x = tensor("INPUT0")
        if (x > 1000).any():
            return pb_utils.InferenceResponse(error=pb_utils.TritonError("too large"))
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 10)])
