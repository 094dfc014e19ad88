"""The OCR example's text_recognition ONNX model as a Python model: softmax(50 * cosine similarity to
the templates in templates.npy beside this file)."""

import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        folder = os.path.join(args["model_repository"], args["model_version"])
        self.templates = np.load(os.path.join(folder, "templates.npy"))

    def execute(self, requests):
        responses = []
        for request in requests:
            glyphs = pb_utils.get_input_tensor_by_name(request, "GLYPHS").as_numpy()
            unit = glyphs / (np.linalg.norm(glyphs, axis=1, keepdims=True) + 1e-6)
            logits = 50.0 * (unit @ self.templates)
            exp = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs = (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PROBS", probs)]))
        return responses
