import json
import os
import sys
import threading
import time

import helper  # beside model.py: the version folder is on sys.path
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)
        self.config = json.loads(args["model_config"])
        pb_utils.Logger.log_info(f"initialized {args['model_instance_name']}")

    def finalize(self):
        name = self.args["model_instance_name"]
        with open(os.path.join(self.args["model_repository"], f"finalized_{name}"), "w") as marker:
            marker.write(name)

    def execute(self, requests):
        start = time.monotonic()
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            x = tensor.as_numpy()
            sleep = float(json.loads(request.parameters()).get("sleep", 0))
            if sleep:
                time.sleep(sleep)
            info = {
                "args": {k: v for k, v in self.args.items() if k != "model_config"},
                "config_name": self.config["name"],
                "max_batch_size": self.config["max_batch_size"],
                "request_id": request.request_id(),
                "correlation_id": request.correlation_id(),
                "flags": request.flags(),
                "parameters": request.parameters(),
                "timeout": request.timeout(),
                "requested": sorted(request.requested_output_names()),
                "input_names": [t.name() for t in request.inputs()],
                "shape": tensor.shape(),
                "triton_dtype": tensor.triton_dtype(),
                "is_cpu": tensor.is_cpu(),
                "batch": len(requests),
                "helper": helper.VALUE,
                "pid": os.getpid(),
                "executable": sys.executable,
                "module": __name__,
                "model_dir": pb_utils.get_model_dir(),
                "start": start,
                "end": time.monotonic(),
                "threads": threading.active_count(),
            }
            info_tensor = np.array([[json.dumps(info).encode()]] * x.shape[0], dtype=np.object_)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("INFO", info_tensor), pb_utils.Tensor("DOUBLE", x * 2)]
                )
            )
        return responses
