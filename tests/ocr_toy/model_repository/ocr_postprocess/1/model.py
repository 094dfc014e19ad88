"""PROBS + BOXES -> TEXT and CONFIDENCE (the lowest of the characters' probabilities)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

HEIGHT = 7


def layout(characters, boxes):
    """The characters in reading order, with spaces at wide gaps and line breaks between lines."""
    text, previous = "", None
    for character, box in zip(characters, boxes, strict=True):
        line, top, left, bottom, _ = box
        if previous is not None:
            scale = max(1, round((bottom - top + 1) / HEIGHT))
            if line != previous[0]:
                text += "\n"
            elif left - previous[4] - 1 > 3 * scale:  # more than half a glyph cell of paper: a space
                text += " "
        text += character
        previous = box
    return text


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.alphabet = parameters["alphabet"]["string_value"]

    def execute(self, requests):
        responses = []
        for request in requests:
            probs = pb_utils.get_input_tensor_by_name(request, "PROBS").as_numpy()
            boxes = pb_utils.get_input_tensor_by_name(request, "BOXES").as_numpy()
            characters = [self.alphabet[i] for i in probs.argmax(axis=1)]
            text = layout(characters, boxes.tolist())
            confidence = float(probs.max(axis=1).min()) if len(probs) else 1.0
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("TEXT", np.array([text.encode()], dtype=np.object_)),
                        pb_utils.Tensor("CONFIDENCE", np.array([confidence], dtype=np.float32)),
                    ]
                )
            )
        return responses
