"""What the HTTP connection layer costs per request, in process: parsing, starting the handler, writing the
response, with a handler that answers at once (as a small model run on the event loop does).

Each request is fed to a connection over a fake transport, then the loop turns once, as it does between
two reads from a socket. Run it with each Python to compare how handlers start (eager Task on 3.12+).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable

import uvloop

from nereid.frontends.http import error_response
from nereid.frontends.http.protocol import HttpRequest, HttpResponse, HttpServer, _Connection

REQUEST = b"GET /v2/health/live HTTP/1.1\r\nhost: x\r\n\r\n"


class Transport(asyncio.Transport):
    """Counts the responses written, keeps the last one, and calls `on_write` (if given) after each."""

    def __init__(self, on_write: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.writes = 0
        self.last = b""
        self._on_write = on_write

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes += 1
        self.last = bytes(data)
        if self._on_write is not None:
            self._on_write()

    def writelines(self, data: object) -> None:
        self.write(b"".join(data))  # type: ignore[arg-type]

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _handler(request: HttpRequest) -> HttpResponse:
    return HttpResponse(200, b"{}")


async def _measure(requests: int, rounds: int) -> list[float]:
    connection = _Connection(HttpServer(_handler, error_response, 1 << 20))
    transport = Transport()
    connection.connection_made(transport)
    per_request_us = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(requests):
            connection.data_received(REQUEST)
            await asyncio.sleep(0)
        per_request_us.append((time.perf_counter() - start) / requests * 1e6)
    if transport.writes != requests * rounds:
        raise RuntimeError(f"{transport.writes} responses written for {requests * rounds} requests")
    return per_request_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=20000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    times = uvloop.run(_measure(args.requests, args.rounds))
    print(
        f"Python {sys.version.split()[0]}: {min(times):.2f} us per request at best, "
        f"{statistics.median(times):.2f} us median over {args.rounds} rounds of {args.requests}"
    )


if __name__ == "__main__":
    main()
