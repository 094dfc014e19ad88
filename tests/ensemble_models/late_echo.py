"""A decoupled model that answers after execute has returned: a thread waits DELAY_MS, then reads IN
(the very tensor execute was given, no copy) and sends it back as OUT with the final flag."""

import threading
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN")
            delay = int(pb_utils.get_input_tensor_by_name(request, "DELAY_MS").as_numpy()[0]) / 1000
            threading.Thread(target=self.answer, args=(request, values, delay), daemon=True).start()
        return None

    def answer(self, request, values, delay):
        time.sleep(delay)
        out = pb_utils.Tensor("OUT", values.as_numpy())
        request.get_response_sender().send(
            pb_utils.InferenceResponse([out]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        )
