import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def row_requests(request, model_name):
    a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
    b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
    return [
        pb_utils.InferenceRequest(
            model_name=model_name,
            inputs=[pb_utils.Tensor("INPUT0", a[i : i + 1]), pb_utils.Tensor("INPUT1", b[i : i + 1])],
            requested_output_names=["OUTPUT0", "OUTPUT1"],
        )
        for i in range(a.shape[0])
    ]


def combine(responses):
    for response in responses:
        if response.has_error():
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(response.error().message()))
    outputs = [
        np.concatenate([pb_utils.get_output_tensor_by_name(r, name).as_numpy() for r in responses])
        for name in ("OUTPUT0", "OUTPUT1")
    ]
    return pb_utils.InferenceResponse(
        [pb_utils.Tensor("OUTPUT0", outputs[0]), pb_utils.Tensor("OUTPUT1", outputs[1])]
    )


class TritonPythonModel:
    async def execute(self, requests):
        answers = []
        for request in requests:
            mode = json.loads(request.parameters()).get("mode", "sync")
            target = "no_such_model" if mode == "missing" else "add_sub"
            calls = row_requests(request, target)
            if mode == "async":
                responses = await asyncio.gather(*(call.async_exec() for call in calls))
            else:
                responses = [call.exec() for call in calls]
            answers.append(combine(responses))
        return answers
