"""Soak: normal traffic beside every hostile client of issue 46, for a bounded time.

Normal clients (one HTTP client of `simple`, one gRPC client of `add_sub`, a Python model in its worker
process) send requests back to back and record each latency. Beside them, each hostile case runs in a
thread of a second process (so that its work does not hold up the normal clients' GIL):

  big-http / big-grpc  a 50 MiB request on a new connection every 2 s, served (simple_identity) or refused
                       (add_sub), in turn
  instances            a load of add_sub with `instance_group [{ count: 1000000 }]` every 5 s
  slow-head / slow-body  connections that send their request head, or body, one byte a second
  idle-flood           connections opened and held, up to --flood of them
  chunk                `FFFFFFFF\\r\\nabc` and `4000001\\r\\nabc` chunked bodies
  small                negative priority and timeout, a 1,000-character sequence_id, an undecodable
                       gRPC message

Every --sample-s the server's memory (PSS of the server and its workers, so that shared memory counts
once) and its process count are sampled. At the end it prints the normal clients' requests, errors and
worst latency per interval, and what each hostile case got back.

    python bench/soak.py --duration 600
    python bench/soak.py --duration 60 --attach HTTP_PORT GRPC_PORT PID   # a server already running
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import ROOT, free_port, start, stop, wait_ready  # noqa: E402
from bench.cpu import tree_pids  # noqa: E402

LARGE = 50 << 20
_SIMPLE = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }
).encode()


# -- the server -------------------------------------------------------------------------------------------
def _start_nereid(http_port: int, grpc_port: int) -> tuple[object, int]:
    proc = start(
        [
            sys.executable,
            "-m",
            "nereid",
            f"--model-repository={ROOT / 'examples' / 'model_repository'}",
            f"--model-repository={ROOT / 'examples' / 'python_model_repository'}",
            "--model-control-mode=explicit",
            "--load-model=*",
            "--http-address=127.0.0.1",
            f"--http-port={http_port}",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={grpc_port}",
            "--allow-metrics=false",
        ],
        "soak",
    )
    wait_ready(f"http://127.0.0.1:{http_port}/v2/health/ready", proc, timeout=120)  # type: ignore[arg-type]
    return proc, proc.pid  # type: ignore[attr-defined]


def pss_mib(pids: set[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                total += sum(int(line.split()[1]) for line in rollup if line.startswith("Pss:"))
        except OSError:
            continue
    return total / 1024


# -- normal clients ---------------------------------------------------------------------------------------
class Interval:
    """What the normal clients saw in one sampling interval."""

    def __init__(self) -> None:
        self.served = 0
        self.errors = 0
        self.worst_s = 0.0

    def add(self, ok: bool, took: float) -> None:
        if ok:
            self.served += 1
        else:
            self.errors += 1
        self.worst_s = max(self.worst_s, took)


def _normal_http(port: int, stop_at: float, record: list[Interval], lock: threading.Lock) -> None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while time.monotonic() < stop_at:
        start_s = time.monotonic()
        try:
            conn.request("POST", "/v2/models/simple/infer", _SIMPLE, {"content-type": "application/json"})
            response = conn.getresponse()
            response.read()
            ok = response.status == 200
        except (OSError, http.client.HTTPException):
            ok = False
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        with lock:
            record[-1].add(ok, time.monotonic() - start_s)


def _tensor(name: str, datatype: str, shape: list[int]) -> object:
    from tritonclient.grpc import service_pb2 as pb

    return pb.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)


def _normal_grpc(port: int, stop_at: float, record: list[Interval], lock: threading.Lock) -> None:
    import grpc
    import numpy as np
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc

    data = np.ones(16, dtype=np.float32).tobytes()
    request = pb.ModelInferRequest(
        model_name="add_sub",
        inputs=[_tensor("INPUT0", "FP32", [1, 16]), _tensor("INPUT1", "FP32", [1, 16])],
        raw_input_contents=[data, data],
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        while time.monotonic() < stop_at:
            start_s = time.monotonic()
            try:
                stub.ModelInfer(request, timeout=30)
                ok = True
            except grpc.RpcError:
                ok = False
            with lock:
                record[-1].add(ok, time.monotonic() - start_s)


# -- hostile clients (in a process of their own) ------------------------------------------------------------
def _status_of(sock: socket.socket) -> str:
    answer = b""
    try:
        while b"\r\n" not in answer:
            piece = sock.recv(4096)
            if not piece:
                break
            answer += piece
    except OSError as exc:
        return type(exc).__name__
    return answer.split()[1].decode() if answer else "closed"


def big_http(port: int, served: bool) -> str:
    if served:
        header = json.dumps(
            {
                "inputs": [
                    {"name": "INPUT0", "datatype": "BYTES", "shape": [1, 1],
                     "parameters": {"binary_data_size": LARGE + 4}}
                ]
            }
        ).encode()  # fmt: skip
        body, path = header + struct.pack("<I", LARGE) + b"x" * LARGE, "simple_identity"
    else:
        header = json.dumps(
            {
                "inputs": [
                    {"name": "INPUT0", "datatype": "FP32", "shape": [LARGE // 4],
                     "parameters": {"binary_data_size": LARGE}},
                    {"name": "INPUT1", "datatype": "FP32", "shape": [4], "parameters": {"binary_data_size": 16}},
                ]
            }
        ).encode()  # fmt: skip
        body, path = header + b"x" * LARGE + b"\0" * 16, "add_sub"
    head = (
        f"POST /v2/models/{path}/infer HTTP/1.1\r\nhost: x\r\ninference-header-content-length: {len(header)}\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        try:
            sock.sendall(head + body)
        except OSError:
            pass
        return _status_of(sock)


def big_grpc(port: int, served: bool) -> str:
    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc

    tensor = _tensor
    if served:
        request = pb.ModelInferRequest(
            model_name="simple_identity", inputs=[tensor("INPUT0", "BYTES", [1, 1])],
            raw_input_contents=[struct.pack("<I", LARGE) + b"x" * LARGE],
        )  # fmt: skip
    else:
        request = pb.ModelInferRequest(
            model_name="add_sub", inputs=[tensor("INPUT0", "FP32", [LARGE // 4]), tensor("INPUT1", "FP32", [4])],
            raw_input_contents=[b"x" * LARGE, b"\0" * 16],
        )  # fmt: skip
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        try:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=120)
            return "OK"
        except grpc.RpcError as exc:
            return exc.code().name


def _instances(port: int) -> str:
    config = {
        "backend": "python",
        "max_batch_size": 8,
        "input": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]} for n in ("INPUT0", "INPUT1")],
        "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]} for n in ("OUTPUT0", "OUTPUT1")],
        "instance_group": [{"count": 1000000, "kind": "KIND_CPU"}],
    }
    body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v2/repository/models/add_sub/load", data=body, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return str(response.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except OSError as exc:
        return type(exc).__name__


def _slow(port: int, body: bool, stop_at: float) -> str:
    """One connection sending its head (or, after a whole head, its body) a byte a second."""
    head = b"POST /v2/models/simple/infer HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n"
    trickle = b"x" * 100000 if body else head
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        if body:
            sock.sendall(head)
        sock.settimeout(1.0)
        for index in range(len(trickle)):
            if time.monotonic() >= stop_at:
                break
            try:
                sock.sendall(trickle[index : index + 1])
                if sock.recv(4096, socket.MSG_PEEK):
                    return _status_of(sock)
            except TimeoutError:
                continue
            except OSError as exc:
                return type(exc).__name__
    return "held to the end"


def _chunk(port: int, size: bytes) -> str:
    head = b"POST /v2/models/simple/infer HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        start_s = time.monotonic()
        sock.sendall(head + size + b"\r\nabc")
        status = _status_of(sock)
        return f"{status} in {'<1' if time.monotonic() - start_s < 1 else '>=1'} s"


def _small(http_port: int, grpc_port: int) -> list[str]:
    import grpc

    answers = []
    for parameters in ({"priority": -1, "timeout": -5}, {"sequence_id": "s" * 1000}):
        body = json.loads(_SIMPLE)
        body["parameters"] = parameters
        request = urllib.request.Request(
            f"http://127.0.0.1:{http_port}/v2/models/simple/infer",
            data=json.dumps(body).encode(),
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                answers.append(f"{next(iter(parameters))}: {response.status}")
        except urllib.error.HTTPError as exc:
            answers.append(f"{next(iter(parameters))}: {exc.code}")
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        try:
            channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")(b"\xff\xff\xff\xff", timeout=30)
            answers.append("undecodable: OK")
        except grpc.RpcError as exc:
            answers.append(f"undecodable: {exc.code().name}")
    return answers


def _hostile(http_port: int, grpc_port: int, stop_at: float, flood: int, out: multiprocessing.Queue) -> None:
    answers: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    lock = threading.Lock()

    def note(case: str, answer: str) -> None:
        with lock:
            answers[case][answer] += 1

    def every(case: str, period_s: float, attempt: object) -> None:
        turn = 0
        while time.monotonic() < stop_at:
            start_s = time.monotonic()
            try:
                result = attempt(turn)  # type: ignore[operator]
            except Exception as exc:  # the case's own failure is an answer too
                result = type(exc).__name__
            for answer in result if isinstance(result, list) else [result]:
                note(case, answer)
            turn += 1
            time.sleep(max(0.0, period_s - (time.monotonic() - start_s)))

    held: list[socket.socket] = []

    def idle_flood() -> None:
        """Open --flood connections and hold them 30 s (less than the idle timeout), then again."""
        while time.monotonic() < stop_at:
            while len(held) < flood and time.monotonic() < stop_at:
                try:
                    held.append(socket.create_connection(("127.0.0.1", http_port), timeout=5))
                    note("idle-flood", "opened")
                except OSError as exc:
                    note("idle-flood", type(exc).__name__)
                    time.sleep(1)
            time.sleep(min(30.0, max(0.0, stop_at - time.monotonic())))
            for sock in held:
                sock.close()
            held.clear()

    threads = [
        threading.Thread(target=every, args=("big-http", 2.0, lambda t: big_http(http_port, t % 2 == 0))),
        threading.Thread(target=every, args=("big-grpc", 2.0, lambda t: big_grpc(grpc_port, t % 2 == 0))),
        threading.Thread(target=every, args=("instances", 5.0, lambda t: _instances(http_port))),
        threading.Thread(
            target=every, args=("chunk", 1.0, lambda t: _chunk(http_port, [b"FFFFFFFF", b"4000001"][t % 2]))
        ),
        threading.Thread(target=every, args=("small", 2.0, lambda t: _small(http_port, grpc_port))),
        threading.Thread(target=idle_flood),
    ]
    for body in (False, True):
        for _ in range(20):  # 20 slow connections of each kind at a time
            case = "slow-body" if body else "slow-head"
            threads.append(
                threading.Thread(
                    target=every, args=(case, 0.0, lambda t, b=body: _slow(http_port, b, stop_at))
                )
            )
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for sock in held:
        sock.close()
    out.put({case: dict(counter) for case, counter in answers.items()})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of traffic")
    parser.add_argument("--sample-s", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--flood", type=int, default=2000, help="idle connections the flood holds at most")
    parser.add_argument("--attach", nargs=3, type=int, metavar=("HTTP_PORT", "GRPC_PORT", "PID"))
    args = parser.parse_args()

    proc = None
    if args.attach:
        http_port, grpc_port, pid = args.attach
    else:
        http_port, grpc_port = free_port(), free_port()
        proc, pid = _start_nereid(http_port, grpc_port)
    try:
        pids = tree_pids(pid)
        print(f"server pid {pid}: {pss_mib(pids):.0f} MiB, {len(pids)} processes before the soak", flush=True)
        stop_at = time.monotonic() + args.duration
        answers: multiprocessing.Queue = multiprocessing.get_context("spawn").Queue()
        hostile = multiprocessing.get_context("spawn").Process(
            target=_hostile, args=(http_port, grpc_port, stop_at, args.flood, answers)
        )
        hostile.start()
        record = [Interval()]
        lock = threading.Lock()
        normal = [
            threading.Thread(target=_normal_http, args=(http_port, stop_at, record, lock)),
            threading.Thread(target=_normal_grpc, args=(grpc_port, stop_at, record, lock)),
        ]
        for thread in normal:
            thread.start()
        started = time.monotonic()
        rows = []
        while time.monotonic() < stop_at:
            time.sleep(min(args.sample_s, max(0.0, stop_at - time.monotonic())))
            pids = tree_pids(pid)
            with lock:
                interval = record[-1]
                record.append(Interval())
            rows.append((time.monotonic() - started, interval, pss_mib(pids), len(pids)))
            print(
                f"{rows[-1][0]:6.0f} s  served {interval.served:6d}  errors {interval.errors:4d}  worst "
                f"{interval.worst_s * 1000:7.1f} ms  memory {rows[-1][2]:7.0f} MiB  processes {rows[-1][3]}",
                flush=True,
            )
        for thread in normal:
            thread.join()
        hostile_answers = answers.get(timeout=300)
        hostile.join(timeout=60)
        time.sleep(10)
        pids = tree_pids(pid)
        print(f"\n10 s after the soak: memory {pss_mib(pids):.0f} MiB, processes {len(pids)}")
        print(
            "\n| time (s) | normal served | normal errors | worst latency (ms) | memory PSS (MiB) | processes |"
        )
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for at, interval, memory, count in rows:
            print(
                f"| {at:.0f} | {interval.served} | {interval.errors} | {interval.worst_s * 1000:.1f} | "
                f"{memory:.0f} | {count} |"
            )
        served = sum(row[1].served for row in rows)
        errors = sum(row[1].errors for row in rows)
        worst = max((row[1].worst_s for row in rows), default=0.0)
        print(f"\nnormal clients: {served} served, {errors} errors, worst latency {worst * 1000:.1f} ms")
        print("\n| hostile case | answers |\n| --- | --- |")
        for case, counter in sorted(hostile_answers.items()):
            text = ", ".join(f"{answer} x{count}" for answer, count in sorted(counter.items()))
            print(f"| {case} | {text} |")
    finally:
        if proc is not None:
            stop(proc)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
