import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self._marker = os.path.join(args["model_repository"], args["model_version"], "cancelled")

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            deadline = time.monotonic() + 60
            while not request.is_cancelled() and time.monotonic() < deadline:
                tick = pb_utils.Tensor("text_output", np.array([b"tick "], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse(output_tensors=[tick]))
                time.sleep(0.01)
            if request.is_cancelled():
                with open(self._marker, "w") as marker:
                    marker.write("yes")
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
