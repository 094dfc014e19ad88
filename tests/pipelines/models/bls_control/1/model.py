import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            action = pb_utils.get_input_tensor_by_name(request, "ACTION").as_numpy()[0].decode()
            name = pb_utils.get_input_tensor_by_name(request, "NAME").as_numpy()[0].decode()
            try:
                if action == "load":
                    pb_utils.load_model(model_name=name)
                elif action == "unload":
                    pb_utils.unload_model(model_name=name)
                ready = pb_utils.is_model_ready(model_name=name)
            except pb_utils.TritonModelException as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(exc.message())))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("READY", np.array([ready]))]))
        return responses
