"""Large JSON infer bodies: decoded off the event loop, so other clients keep their latency, and one at a
time, so the server's peak memory stays in proportion to the bodies it holds."""

from __future__ import annotations

import asyncio
import gc
import http.client
import os
import statistics
import threading
import time
from pathlib import Path
from types import FrameType

from nereid.errors import InvalidArgument
from nereid.frontends.http.large_bodies import OFF_LOOP_FROM, LargeBodyDecoder
from tests.conftest import start_nereid, stop

# 10 MB of digits: about 5 s of JSON parsing on a busy 2-core machine
_BODY = (
    b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":['
    + b",".join([b"1234"] * 2_000_000)
    + b"]}]}"
)
_SMALL = (
    b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":['
    + b",".join([b"1"] * 16)
    + b"]},"
    b'{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[' + b",".join([b"2"] * 16) + b"]}]}"
)


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _cpu_s(pid: int) -> float:
    """CPU seconds of the process's own threads (not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _post(port: int, body: bytes) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("POST", "/v2/models/simple/infer", body, {"content-type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_four_large_json_bodies_keep_others_served_and_memory_bounded(
    examples_repository: Path, tmp_path: Path
) -> None:
    server = start_nereid(examples_repository, tmp_path / "nereid.log")
    try:
        port = server.http_port
        pid = server.process.pid
        assert _post(port, _SMALL)[0] == 200
        assert _post(port, _BODY)[0] == 500  # starts the helper process, which the first large body waits for
        before = _peak_rss_kib(pid)
        cpu_before = _cpu_s(pid)
        answers: list[tuple[int, bytes]] = []
        threads = [threading.Thread(target=lambda: answers.append(_post(port, _BODY))) for _ in range(4)]
        for thread in threads:
            thread.start()
        latencies: list[float] = []
        probe = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            deadline = time.monotonic() + 120
            while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
                start = time.perf_counter()
                probe.request("POST", "/v2/models/simple/infer", _SMALL)
                response = probe.getresponse()
                response.read()
                latencies.append(time.perf_counter() - start)
                assert response.status == 200
                time.sleep(0.01)
        finally:
            probe.close()
            for thread in threads:
                thread.join()
        # each body was parsed whole: the shape it declares does not match its data (Triton's reader: 500)
        assert [status for status, _ in answers] == [500] * 4, answers
        assert all(b"shape" in body or b"elements" in body for _, body in answers), answers
        grown_mib = (_peak_rss_kib(pid) - before) / 1024
        body_mib = len(_BODY) / 2**20
        # the four bodies, each joined from its pieces (twice its size for a moment), plus the copy on its
        # way to the helper: measured 87 MiB for four 10 MiB bodies; parsed on the loop it was 165 MiB
        assert grown_mib < 12 * body_mib, (
            f"peak RSS grew {grown_mib:.0f} MiB for bodies of {body_mib:.0f} MiB"
        )
        # Nobody else delayed, checked two ways (as in test_http_limits): the server process's own CPU time
        # (the helper is another process) shows the event loop never parsed a body, where parsing the four
        # took it seconds; the probe's median stays under 100 ms, and its worst case under a generous
        # second, since on a loaded shared 2-core machine a process can wait that long for a CPU at all.
        server_cpu = _cpu_s(pid) - cpu_before
        assert server_cpu < 0.5, f"the server process spent {server_cpu:.2f} s of CPU on four bodies"
        assert len(latencies) >= 5
        message = f"worst {max(latencies) * 1000:.0f} ms, median {statistics.median(latencies) * 1000:.1f} ms"
        assert statistics.median(latencies) < 0.1, message
        assert max(latencies) < 1.0, message
    finally:
        stop(server.process)


def test_a_refused_large_body_is_let_go_at_once() -> None:
    # With the cyclic collector off, as it mostly is in a serving process (heap.py), no frame of the decoder
    # may keep the body once the refusal is answered: Triton's QA sends 100 refused 1 MiB bodies and
    # measures the server's RSS. (The executor's threads may hold the call's arguments a moment longer.)
    body = b" " * OFF_LOOP_FROM
    decoder = LargeBodyDecoder()

    async def refused() -> str:  # as the HTTP app answers it: the error caught where the request is
        try:
            await decoder.decode(body, 9_999_999, "simple", "")
        except InvalidArgument as exc:
            return exc.message
        raise AssertionError("the body was not refused")

    def decoder_frames() -> list[FrameType]:
        return [
            r for r in gc.get_referrers(body) if isinstance(r, FrameType) and r.f_code.co_name == "decode"
        ]

    gc.disable()
    try:
        for _ in range(3):
            assert asyncio.run(refused()).startswith("inference header size should be in range")
            assert decoder_frames() == []
    finally:
        gc.enable()
        decoder.close()
