"""One Python model behind several test models: the `operation` config parameter picks what it does.

add_one, double: OUTPUT0 = INPUT0 + 1 or * 2, after `delay_s` seconds; SPAN gives each request the
  wall-clock start and end of its execution, so a test can see two steps overlap.
sum: SUM = A + B.   fail: every request fails with "boom".
sequence: OUTPUT0 = INPUT0, CORRID and FLAGS the request's correlation id and flags.
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.operation = parameters["operation"]["string_value"]
        self.delay_s = float(parameters.get("delay_s", {}).get("string_value", "0"))

    def execute(self, requests):
        started = time.time()
        if self.delay_s:
            time.sleep(self.delay_s)
        span = np.array([started, time.time()], dtype=np.float64)
        return [self._answer(request, span) for request in requests]

    def _answer(self, request, span):
        def tensor(name):
            return pb_utils.get_input_tensor_by_name(request, name).as_numpy()

        if self.operation == "fail":
            return pb_utils.InferenceResponse(error=pb_utils.TritonError("boom"))
        if self.operation == "sum":
            return pb_utils.InferenceResponse([pb_utils.Tensor("SUM", tensor("A") + tensor("B"))])
        x = tensor("INPUT0")
        rows = x.shape[0]
        if self.operation == "sequence":
            corrid = np.full((rows, 1), int(request.correlation_id()), dtype=np.int64)
            flags = np.full((rows, 1), request.flags(), dtype=np.int64)
            outputs = [pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("CORRID", corrid)]
            return pb_utils.InferenceResponse(outputs + [pb_utils.Tensor("FLAGS", flags)])
        result = x + 1 if self.operation == "add_one" else x * 2
        spans = np.tile(span, (rows, 1))
        return pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUTPUT0", result.astype(np.float32)), pb_utils.Tensor("SPAN", spans)]
        )
