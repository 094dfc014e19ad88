import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().copy()
            delay = int(pb_utils.get_input_tensor_by_name(request, "DELAY_MS").as_numpy()[0]) / 1000
            if delay < 0:
                raise ValueError("DELAY_MS must not be negative")
            inline = json.loads(request.parameters()).get("inline", False)
            if inline:
                self.respond(request, values, delay)
            else:
                thread = threading.Thread(target=self.respond, args=(request, values, delay), daemon=True)
                thread.start()
                self.threads.append(thread)
        return None

    def respond(self, request, values, delay):
        sender = request.get_response_sender()
        for index, value in enumerate(values):
            if request.is_cancelled():
                pb_utils.Logger.log_info(f"repeat: cancelled after {index} of {len(values)} responses")
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            if value < 0:
                error = pb_utils.TritonError(f"negative value {value} at index {index}")
                sender.send(pb_utils.InferenceResponse(error=error))
            else:
                out = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
                idx = pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32))
                sender.send(pb_utils.InferenceResponse([out, idx]))
            time.sleep(delay)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join(timeout=5)
