"""Answers each request with the index of its execution (ORDER), so a test sees the order requests ran.

A request whose GATE input names a file holds the instance until that file exists, writing
`<file>.started` first: a test uses it to queue requests behind a busy instance deterministically.
"""

import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.executions = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            gate = pb_utils.get_input_tensor_by_name(request, "GATE")
            path = gate.as_numpy().flat[0].decode() if gate is not None else ""
            if path:
                open(path + ".started", "w").close()
                deadline = time.monotonic() + 60
                while not os.path.exists(path) and time.monotonic() < deadline:
                    time.sleep(0.005)
            order = np.full((1, 1), self.executions, np.int32)
            self.executions += 1
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("ORDER", order)]))
        return responses
