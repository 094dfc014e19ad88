import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if (x < 0).any():
                raise ValueError("negative input")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)]))
        return responses
