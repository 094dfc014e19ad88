"""The OCR example's text_detection ONNX model as a Python model: sigmoid(10 * (3x3 ink sum - 0.5))."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            pixels = pb_utils.get_input_tensor_by_name(request, "PIXELS").as_numpy()
            height, width = pixels.shape
            padded = np.pad(pixels, 1)
            total = sum(padded[y : y + height, x : x + width] for y in range(3) for x in range(3))
            text_map = (1.0 / (1.0 + np.exp(-10.0 * (total - 0.5)))).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT_MAP", text_map)]))
        return responses
