"""Memory after large requests, each on a new connection: back near its baseline once the server is idle.

Issue 46's reproduction: 50 MiB request bodies, over HTTP and gRPC, served (simple_identity, a Python
model in its worker process) and refused (add_sub refuses the tensor's shape), each on a connection of its
own. Before the fix every one of them stayed in memory (50 to 100 MB a request) until the cyclic
collector's next full pass. Memory is the PSS of the server and its workers, so that the shared memory a
request crosses to its worker in counts once.
"""

from __future__ import annotations

import json
import shutil
import socket
import struct
from collections.abc import Iterator

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.conftest import ROOT, RunningServer, child_processes, start_nereid, stop

SIZE = 50 << 20
REQUESTS = 3  # of each kind: 12 in all, 600 MB of bodies
# What stays is bounded, whatever the number of requests: the Python model's shared memory, grown to its
# largest request and answer (about 2 x 50 MiB) and kept for the next one, and the gRPC core's and the
# allocator's buffers (about 100 MiB after the first large gRPC messages). Before the fix the 12 requests
# kept about 650 MiB, and 30 of each kind 6.3 GB.
ALLOWED_GROWTH_MIB = 400


def _pss_mib(pid: int) -> float:
    total = 0
    tree, index = [pid], 0
    while index < len(tree):  # the server, its workers, and theirs
        tree += child_processes(tree[index])
        index += 1
    for process in tree:
        try:
            with open(f"/proc/{process}/smaps_rollup") as rollup:
                total += sum(int(line.split()[1]) for line in rollup if line.startswith("Pss:"))
        except OSError:
            continue
    return total / 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("large")
    repository = root / "models"
    shutil.copytree(ROOT / "examples" / "python_model_repository", repository)
    running = start_nereid(repository, root / "server.log", grpc=True)
    try:
        yield running
    finally:
        stop(running.process)


def _http(port: int, served: bool) -> int:
    if served:
        inputs = [
            {
                "name": "INPUT0",
                "datatype": "BYTES",
                "shape": [1, 1],
                "parameters": {"binary_data_size": SIZE + 4},
            }
        ]
        data, model = struct.pack("<I", SIZE) + bytes(SIZE), "simple_identity"
    else:
        inputs = [
            {
                "name": "INPUT0",
                "datatype": "FP32",
                "shape": [SIZE // 4],
                "parameters": {"binary_data_size": SIZE},
            },
            {"name": "INPUT1", "datatype": "FP32", "shape": [4], "parameters": {"binary_data_size": 16}},
        ]
        data, model = bytes(SIZE + 16), "add_sub"
    # The answer in binary: as JSON, 50 MiB of zero bytes would be 300 MB of "\u0000" escapes.
    outputs = [{"name": "OUTPUT0", "parameters": {"binary_data": True}}] if served else []
    header = json.dumps({"inputs": inputs, "outputs": outputs}).encode()
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nhost: x\r\ninference-header-content-length: {len(header)}\r\n"
        f"content-length: {len(header) + len(data)}\r\nconnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(head + header)
        sock.sendall(data)
        answer = bytearray()
        while chunk := sock.recv(1 << 20):
            answer += chunk
    return int(answer.split(maxsplit=2)[1])


def _grpc(port: int, served: bool) -> grpc.StatusCode:
    def tensor(name: str, datatype: str, shape: list[int]) -> pb.ModelInferRequest.InferInputTensor:
        return pb.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)

    if served:
        request = pb.ModelInferRequest(
            model_name="simple_identity", inputs=[tensor("INPUT0", "BYTES", [1, 1])],
            raw_input_contents=[struct.pack("<I", SIZE) + bytes(SIZE)],
        )  # fmt: skip
    else:
        request = pb.ModelInferRequest(
            model_name="add_sub", inputs=[tensor("INPUT0", "FP32", [SIZE // 4]), tensor("INPUT1", "FP32", [4])],
            raw_input_contents=[bytes(SIZE), bytes(16)],
        )  # fmt: skip
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:  # a new connection
        try:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=120)
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


@pytest.mark.timeout(300)  # 600 MB through loopback and a worker: seconds, more on a busy 2-CPU host
def test_50_mib_requests_on_new_connections_leave_memory_near_its_baseline(server: RunningServer) -> None:
    assert server.grpc_port is not None
    baseline = _pss_mib(server.process.pid)
    for served in (True, False):
        for _ in range(REQUESTS):
            assert _http(server.http_port, served) == (200 if served else 400)
            expected = grpc.StatusCode.OK if served else grpc.StatusCode.INVALID_ARGUMENT
            assert _grpc(server.grpc_port, served) == expected
    # Nothing waits for the collector: once every request is answered, what is left is what stays.
    growth = _pss_mib(server.process.pid) - baseline
    assert growth < ALLOWED_GROWTH_MIB, f"memory grew by {growth:.0f} MiB over {4 * REQUESTS} requests"
