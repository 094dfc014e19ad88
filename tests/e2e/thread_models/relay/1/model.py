import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            route = json.loads(request.parameters()).get("route", "")
            pb_utils.Logger.log_info(f"{self.name} relays along '{route}'")
            data = pb_utils.get_input_tensor_by_name(request, "IN")
            pids = np.array([os.getpid()], dtype=np.int64)
            if route:
                target, _, rest = route.partition(",")
                call = pb_utils.InferenceRequest(
                    model_name=target,
                    inputs=[data],
                    requested_output_names=["OUT"],
                    parameters={"route": rest},
                )
                answer = call.exec()
                if answer.has_error():
                    responses.append(pb_utils.InferenceResponse(error=answer.error()))
                    continue
                pids = np.concatenate([pids, pb_utils.get_output_tensor_by_name(answer, "OUT").as_numpy()])
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pids)]))
        return responses
