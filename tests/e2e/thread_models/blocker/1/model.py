import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.release = os.path.join(args["model_repository"], "release")

    def execute(self, requests):
        deadline = time.monotonic() + 30
        while not os.path.exists(self.release) and time.monotonic() < deadline:
            time.sleep(0.01)  # holds this instance's thread, as a slow model would
        answer = b"released" if os.path.exists(self.release) else b"timed out"
        out = pb_utils.Tensor("OUT", np.array([answer], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
