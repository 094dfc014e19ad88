"""Doubles X, and tells each request how many requests its execution held (N).

A request whose GATE input names a file holds the instance until that file exists, writing
`<file>.started` first: a test uses it to queue requests behind a busy instance deterministically.
"""

import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            gate = pb_utils.get_input_tensor_by_name(request, "GATE")
            path = gate.as_numpy().flat[0].decode() if gate is not None else ""
            if path:
                open(path + ".started", "w").close()
                deadline = time.monotonic() + 60
                while not os.path.exists(path) and time.monotonic() < deadline:
                    time.sleep(0.005)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            count = np.full((x.shape[0], 1), len(requests), np.int32)
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2), pb_utils.Tensor("N", count)])
            )
        return responses
