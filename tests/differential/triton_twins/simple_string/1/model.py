"""Twin of Triton's 'simple_string' example.

Elements are decimal integer strings; OUTPUT0/OUTPUT1 are the sum/difference as decimal strings.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


def _to_int(arr):
    flat = [int(x.decode() if isinstance(x, bytes) else x) for x in arr.reshape(-1)]
    return np.array(flat, dtype=np.int64).reshape(arr.shape)


def _to_str(arr):
    flat = [str(int(x)).encode() for x in arr.reshape(-1)]
    return np.array(flat, dtype=np.object_).reshape(arr.shape)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = _to_int(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())
            b = _to_int(pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy())
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", _to_str(a + b)),
                        pb_utils.Tensor("OUTPUT1", _to_str(a - b)),
                    ]
                )
            )
        return responses
