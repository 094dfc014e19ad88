import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.other = "pong" if args["model_name"] == "ping" else "ping"

    def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            if n == 0:
                responses.append(
                    pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([0], np.int32))])
                )
                continue
            call = pb_utils.InferenceRequest(
                model_name=self.other,
                inputs=[pb_utils.Tensor("N", np.array([n - 1], np.int32))],
                requested_output_names=["OUT"],
            )
            answer = call.exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            got = pb_utils.get_output_tensor_by_name(answer, "OUT").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", got + 1)]))
        return responses
