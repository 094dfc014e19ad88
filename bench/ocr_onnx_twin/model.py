"""An ONNX model run by ONNX Runtime inside a Python model: the stand-in for Triton's ONNX Runtime
backend, which the real Triton build used by the benchmarks lacks. It serves model.onnx from its version
folder under the config's input and output names; the requests of one execution that have the same
shapes run as one batch (as the ONNX Runtime backend runs a dynamic batch), the others one by one."""

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]
        options = ort.SessionOptions()
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as Nereid's backend
        path = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        arrays = [
            [pb_utils.get_input_tensor_by_name(r, name).as_numpy() for name in self.inputs] for r in requests
        ]
        groups = {}
        for index, inputs in enumerate(arrays):
            groups.setdefault(tuple(a.shape[1:] for a in inputs), []).append(index)
        responses = [None] * len(requests)
        for members in groups.values():
            feed = {
                name: np.concatenate([arrays[i][k] for i in members]) for k, name in enumerate(self.inputs)
            }
            results = self.session.run(self.outputs, feed)
            start = 0
            for i in members:
                rows = arrays[i][0].shape[0]
                tensors = [
                    pb_utils.Tensor(n, r[start : start + rows])
                    for n, r in zip(self.outputs, results, strict=True)
                ]
                responses[i] = pb_utils.InferenceResponse(tensors)
                start += rows
        return responses
