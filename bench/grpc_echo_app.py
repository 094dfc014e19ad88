"""The Python ceiling for gRPC: a bare grpc.aio server that answers ModelInfer for one model (`simple`, or
`add_sub` of the Python examples) with a fixed response, no model and no checks. It answers ModelMetadata and ModelConfig too, which perf_analyzer reads
before it starts. Same event loop (uvloop) and message limits as Nereid.

    python bench/grpc_echo_app.py PORT [simple|add_sub]
"""

from __future__ import annotations

import sys

import grpc
import numpy as np
import uvloop
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

# model -> (data type, platform, max_batch_size, its two outputs for INPUT0 = 0..15 and INPUT1 = ones)
MODELS = {
    "simple": (
        "INT32",
        "onnxruntime_onnx",
        8,
        (np.arange(1, 17, dtype="<i4"), np.arange(-1, 15, dtype="<i4")),
    ),
    "add_sub": ("FP32", "python", 64, (np.arange(1, 17, dtype="<f4"), np.arange(-1, 15, dtype="<f4"))),
}


def answers(model: str) -> tuple[pb.ModelMetadataResponse, pb.ModelConfigResponse, pb.ModelInferResponse]:
    """What the server says of `model`, and its one infer response."""
    datatype, platform, max_batch_size, outputs = MODELS[model]
    inputs, output_names = ("INPUT0", "INPUT1"), ("OUTPUT0", "OUTPUT1")
    config_type = mc.DataType.Value(f"TYPE_{datatype}")
    metadata = pb.ModelMetadataResponse(
        name=model,
        versions=["1"],
        platform=platform,
        inputs=[
            pb.ModelMetadataResponse.TensorMetadata(name=n, datatype=datatype, shape=[-1, 16]) for n in inputs
        ],
        outputs=[
            pb.ModelMetadataResponse.TensorMetadata(name=n, datatype=datatype, shape=[-1, 16])
            for n in output_names
        ],
    )
    config = pb.ModelConfigResponse(
        config=mc.ModelConfig(
            name=model,
            platform=platform,
            max_batch_size=max_batch_size,
            input=[mc.ModelInput(name=n, data_type=config_type, dims=[16]) for n in inputs],
            output=[mc.ModelOutput(name=n, data_type=config_type, dims=[16]) for n in output_names],
        )
    )
    response = pb.ModelInferResponse(
        model_name=model,
        model_version="1",
        outputs=[
            pb.ModelInferResponse.InferOutputTensor(name=n, datatype=datatype, shape=[1, 16])
            for n in output_names
        ],
        raw_output_contents=[o.tobytes() for o in outputs],
    )
    return metadata, config, response


METADATA, CONFIG, RESPONSE = answers(sys.argv[2] if len(sys.argv) > 2 else "simple")


class EchoServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    async def ServerLive(self, request, context):  # type: ignore[no-untyped-def]
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):  # type: ignore[no-untyped-def]
        return pb.ServerReadyResponse(ready=True)

    async def ServerMetadata(self, request, context):  # type: ignore[no-untyped-def]
        return pb.ServerMetadataResponse(name="echo", version="2.51.0")

    async def ModelReady(self, request, context):  # type: ignore[no-untyped-def]
        return pb.ModelReadyResponse(ready=True)

    async def ModelMetadata(self, request, context):  # type: ignore[no-untyped-def]
        return METADATA

    async def ModelConfig(self, request, context):  # type: ignore[no-untyped-def]
        return CONFIG

    async def ModelInfer(self, request, context):  # type: ignore[no-untyped-def]
        return RESPONSE


async def main(port: int) -> None:
    limit = 2**31 - 1
    server = grpc.aio.server(
        options=[("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)]
    )
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(EchoServicer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"echo gRPC server on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
