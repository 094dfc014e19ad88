import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0]
            if prompt.strip():
                piece = pb_utils.Tensor("text_output", np.array([b"partial"], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse(output_tensors=[piece]))
            sender.send(
                pb_utils.InferenceResponse(error=pb_utils.TritonError("broken: the model failed")),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
