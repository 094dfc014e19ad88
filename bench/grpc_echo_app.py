"""The Python ceiling for gRPC: a bare grpc.aio server that answers ModelInfer for one model (`simple`, or
`add_sub` of the Python examples) with a fixed response, no model and no checks. It answers ModelMetadata and
ModelConfig too, which perf_analyzer reads before it starts, and ModelStatistics with the number of infer
calls answered (by every process), so that a bench can take CPU time per request. Same event loop (uvloop)
and message limits as Nereid.

    python bench/grpc_echo_app.py PORT [simple|add_sub] [PROCESSES] [aio|native]

`native` serves on pygrpc-native's grpc.aio-compatible server instead: the ceiling of Nereid's native core.

With PROCESSES > 1 it follows grpcio's multiprocessing pattern: that many worker processes, forked before
grpc starts, each with a server of its own on the same port (SO_REUSEPORT); the kernel spreads connections,
not calls, over them. Stopping the parent stops the workers.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
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


MODEL = sys.argv[2] if len(sys.argv) > 2 else "simple"
METADATA, CONFIG, RESPONSE = answers(MODEL)
PROCESSES = int(sys.argv[3]) if len(sys.argv) > 3 else 1
CORE = sys.argv[4] if len(sys.argv) > 4 else "aio"
# Infer calls answered, one slot per worker (each adds to its own, so no lock), shared over fork.
COUNTS = multiprocessing.get_context("fork").Array("q", PROCESSES, lock=False)
WORKER = 0  # this process's slot


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
        COUNTS[WORKER] += 1
        return RESPONSE

    async def ModelStatistics(self, request, context):  # type: ignore[no-untyped-def]
        success = pb.StatisticDuration(count=sum(COUNTS))
        stats = pb.ModelStatistics(
            name=MODEL, version="1", inference_stats=pb.InferStatistics(success=success)
        )
        return pb.ModelStatisticsResponse(model_stats=[stats])


async def main(port: int) -> None:
    limit = 2**31 - 1
    options = [
        ("grpc.max_send_message_length", limit),
        ("grpc.max_receive_message_length", limit),
        ("grpc.so_reuseport", int(PROCESSES > 1)),
    ]
    if CORE == "native":
        import pygrpc_native.aio

        server = pygrpc_native.aio.server(options=options)
    else:
        server = grpc.aio.server(options=options)
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(EchoServicer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"echo gRPC server on 127.0.0.1:{port} (pid {os.getpid()})", flush=True)
    await server.wait_for_termination()


def worker(index: int, port: int) -> None:
    global WORKER
    WORKER = index
    uvloop.run(main(port))


def serve_processes(port: int) -> None:
    # grpcio's pattern: hold the port with SO_REUSEPORT while the workers bind it, fork before any grpc
    # object exists in this process.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as reserved:
        reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        reserved.bind(("127.0.0.1", port))
        context = multiprocessing.get_context("fork")
        workers = [context.Process(target=worker, args=(i, port)) for i in range(PROCESSES)]
        for process in workers:
            process.start()

        def stop(*_: object) -> None:
            for process in workers:
                process.terminate()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        for process in workers:
            process.join()


if __name__ == "__main__":
    if PROCESSES > 1:
        serve_processes(int(sys.argv[1]))
    else:
        uvloop.run(main(int(sys.argv[1])))
