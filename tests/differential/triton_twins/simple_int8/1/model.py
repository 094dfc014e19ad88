"""Twin of Triton's 'simple_int8' example: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (INT8, wrapping like the ONNX model)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    DTYPE = np.int8

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out0 = (a + b).astype(self.DTYPE)
            out1 = (a - b).astype(self.DTYPE)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", out0),
                        pb_utils.Tensor("OUTPUT1", out1),
                    ]
                )
            )
        return responses
