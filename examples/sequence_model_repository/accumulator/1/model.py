import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Each sequence sums its inputs; the running totals are kept per correlation id."""

    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            end = pb_utils.get_input_tensor_by_name(request, "END").as_numpy()
            ready = pb_utils.get_input_tensor_by_name(request, "READY").as_numpy()
            corrid = pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy()
            key = request.correlation_id()
            if start[0, 0]:
                self.totals[key] = np.zeros_like(value)
            total = self.totals.get(key, np.zeros_like(value)) + value
            self.totals[key] = total
            if end[0, 0]:
                del self.totals[key]
            flags = np.array([[request.flags()]], dtype=np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUTPUT", total.astype(np.int32)),
                        pb_utils.Tensor(
                            "FLAGS", np.concatenate([start, end, ready, flags], axis=1).astype(np.int32)
                        ),
                        pb_utils.Tensor("CORRID_OUT", corrid.astype(np.uint64)),
                    ]
                )
            )
        return responses
