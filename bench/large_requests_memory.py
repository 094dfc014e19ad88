"""Memory of a running server before, during and after large requests, each on a new connection.

Issue 46's reproduction: N requests of 50 MiB over HTTP and gRPC, served (simple_identity) or refused
(add_sub), against a server of examples/python_model_repository (Nereid or Triton). Memory is the PSS of
the server and every process under it (Python model workers, Triton's stubs), so that shared memory
counts once; "after" is read once the server has been idle for 10 s.

    python bench/large_requests_memory.py SERVER_PID HTTP_PORT GRPC_PORT 30 [http-accepted,grpc-refused]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cpu import tree_pids  # noqa: E402
from bench.soak import big_grpc, big_http, pss_mib  # noqa: E402

CASES = ("http-accepted", "http-refused", "grpc-accepted", "grpc-refused")


def main() -> None:
    pid, http_port, grpc_port, count = (int(arg) for arg in sys.argv[1:5])
    cases = sys.argv[5].split(",") if len(sys.argv) > 5 else CASES
    print(f"baseline {pss_mib(tree_pids(pid)):.0f} MiB")
    for case in cases:
        protocol, kind = case.split("-")
        send = big_http if protocol == "http" else big_grpc
        port = http_port if protocol == "http" else grpc_port
        before = pss_mib(tree_pids(pid))
        peak, answers = before, set()
        for _ in range(count):
            answers.add(send(port, kind == "accepted"))
            peak = max(peak, pss_mib(tree_pids(pid)))
        time.sleep(10)
        after = pss_mib(tree_pids(pid))
        print(
            f"{case:14s} x{count} answers {sorted(answers)}: before {before:.0f}, peak {peak:.0f}, "
            f"idle after {after:.0f} MiB",
            flush=True,
        )


if __name__ == "__main__":
    main()
