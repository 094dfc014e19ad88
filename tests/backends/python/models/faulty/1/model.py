import os
import signal
import sys
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # A marker file beside the model makes the next start fail, to test a worker that cannot restart.
        if os.path.exists(os.path.join(args["model_repository"], "fail_initialize")):
            raise RuntimeError("initialize refused: fail_initialize exists")

    def execute(self, requests):
        responses = []
        for request in requests:
            command = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0].decode()
            if command == "raise":
                raise ValueError("the model raised")
            if command == "exit":
                sys.exit(3)
            if command == "os_exit":
                os._exit(7)
            if command == "segfault":
                os.kill(os.getpid(), signal.SIGSEGV)
            if command == "hang":
                time.sleep(600)
            if command == "error":
                error = pb_utils.TritonError(
                    "the model refused this request", pb_utils.TritonError.INVALID_ARG
                )
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            out = np.array([command.encode(), str(os.getpid()).encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
