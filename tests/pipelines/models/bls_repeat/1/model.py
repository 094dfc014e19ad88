import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            call = pb_utils.InferenceRequest(
                model_name="repeat",
                inputs=[
                    pb_utils.Tensor("IN", values),
                    pb_utils.Tensor("DELAY_MS", np.array([0], dtype=np.int32)),
                ],
                requested_output_names=["OUT"],
            )
            collected = []
            error = None
            for response in call.exec(decoupled=True):
                if response.has_error():
                    error = response.error().message()
                    break
                out = pb_utils.get_output_tensor_by_name(response, "OUT")
                if out is not None:  # the last response carries only the final flag
                    collected.append(int(out.as_numpy()[0]))
            if error is not None:
                answers.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(error)))
            else:
                out = pb_utils.Tensor("OUT", np.array(collected, dtype=np.int32))
                answers.append(pb_utils.InferenceResponse([out]))
        return answers
