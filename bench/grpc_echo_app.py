"""The Python ceiling for gRPC: a bare grpc.aio server that answers ModelInfer for `simple` with a fixed
response, no model and no checks. It answers ModelMetadata and ModelConfig too, which perf_analyzer reads
before it starts. Same event loop (uvloop) and message limits as Nereid.

    python bench/grpc_echo_app.py PORT
"""

from __future__ import annotations

import sys

import grpc
import numpy as np
import uvloop
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

_TENSORS = [("INPUT0", "INT32"), ("INPUT1", "INT32")], [("OUTPUT0", "INT32"), ("OUTPUT1", "INT32")]
METADATA = pb.ModelMetadataResponse(
    name="simple",
    versions=["1"],
    platform="onnxruntime_onnx",
    inputs=[
        pb.ModelMetadataResponse.TensorMetadata(name=n, datatype=d, shape=[-1, 16]) for n, d in _TENSORS[0]
    ],
    outputs=[
        pb.ModelMetadataResponse.TensorMetadata(name=n, datatype=d, shape=[-1, 16]) for n, d in _TENSORS[1]
    ],
)
CONFIG = pb.ModelConfigResponse(
    config=mc.ModelConfig(
        name="simple",
        platform="onnxruntime_onnx",
        max_batch_size=8,
        input=[mc.ModelInput(name=n, data_type=mc.TYPE_INT32, dims=[16]) for n, _ in _TENSORS[0]],
        output=[mc.ModelOutput(name=n, data_type=mc.TYPE_INT32, dims=[16]) for n, _ in _TENSORS[1]],
    )
)
RESPONSE = pb.ModelInferResponse(
    model_name="simple",
    model_version="1",
    outputs=[
        pb.ModelInferResponse.InferOutputTensor(name=n, datatype=d, shape=[1, 16]) for n, d in _TENSORS[1]
    ],
    raw_output_contents=[np.arange(1, 17, dtype="<i4").tobytes(), np.arange(-1, 15, dtype="<i4").tobytes()],
)


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
