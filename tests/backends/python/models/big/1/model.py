import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            floats = pb_utils.get_input_tensor_by_name(request, "FLOATS").as_numpy()
            strings = pb_utils.get_input_tensor_by_name(request, "STRINGS").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("FLOATS_OUT", floats[::-1].copy()),
                        pb_utils.Tensor("STRINGS_OUT", strings[::-1].copy()),
                    ]
                )
            )
        return responses
