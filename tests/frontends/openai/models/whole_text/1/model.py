import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "prompt").as_numpy().reshape(-1)[0].decode()
            parameters = json.loads(request.parameters() or "{}")
            answer = prompt.upper() + (
                f" t={parameters['temperature']}" if "temperature" in parameters else ""
            )
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("answer", np.array([[answer.encode()]], dtype=np.object_)),
                        pb_utils.Tensor("prompt_tokens", np.array([[len(prompt)]], dtype=np.int32)),
                        pb_utils.Tensor("completion_tokens", np.array([[7]], dtype=np.int32)),
                    ]
                )
            )
        return responses
