"""wrk throughput of Nereid's HTTP infer path for `simple` against a bare uvicorn+orjson echo app."""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from _common import (
    SIMPLE_BODY,
    ensure_modules,
    free_port,
    require_binary,
    start,
    start_nereid,
    stop,
    wait_ready,
)

TARGET = 0.5  # Nereid should reach at least half of the echo app's requests/sec
INFER_PATH = "/v2/models/simple/infer"


def lua_script(directory: Path, body: str) -> Path:
    """A wrk script that POSTs `body` as JSON."""
    path = directory / "post.lua"
    path.write_text(
        f'wrk.method = "POST"\nwrk.body = [==[{body}]==]\nwrk.headers["Content-Type"] = "application/json"\n'
    )
    return path


def run_wrk(wrk: str, url: str, script: Path, seconds: int, connections: int) -> float:
    """Requests/sec from one wrk run; raises if any response was not 2xx/3xx."""
    out = subprocess.run(
        [wrk, "-t2", f"-c{connections}", f"-d{seconds}s", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if "Non-2xx or 3xx responses" in out:
        raise RuntimeError(f"non-2xx responses from {url}:\n{out}")
    if "Socket errors" in out:
        print(f"  warning: {url}: {re.search(r'Socket errors.*', out).group(0)}")  # type: ignore[union-attr]
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if match is None:
        raise RuntimeError(f"no Requests/sec in wrk output:\n{out}")
    return float(match.group(1))


def check_nereid(port: int, body: bytes) -> None:
    """One request by hand: OUTPUT0 must be INPUT0 + INPUT1."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{INFER_PATH}", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        outputs = {o["name"]: o["data"] for o in json.loads(resp.read())["outputs"]}
    if outputs.get("OUTPUT0") != [i + 1 for i in range(16)]:
        raise RuntimeError(f"unexpected Nereid answer: {outputs}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=4, help="wrk connections")
    parser.add_argument("--warmup", type=int, default=1, help="seconds of unmeasured wrk warm-up")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds; the verdict uses the median ratio"
    )
    args = parser.parse_args()

    ensure_modules(
        ("uvicorn", "uvicorn"), ("uvloop", "uvloop"), ("httptools", "httptools"), ("orjson", "orjson")
    )
    wrk = require_binary("wrk", "wrk")
    body = json.dumps(SIMPLE_BODY, separators=(",", ":"))
    nereid_port, echo_port = free_port(), free_port()
    nereid = echo = None
    try:
        nereid = start_nereid(nereid_port)
        echo = start(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--app-dir",
                str(Path(__file__).parent),
                "echo_app:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(echo_port),
                "--workers",
                "1",
                "--loop",
                "uvloop",
                "--http",
                "httptools",
                "--no-access-log",
                "--log-level",
                "warning",
            ],
            "echo",
        )
        wait_ready(f"http://127.0.0.1:{nereid_port}/v2/health/ready", nereid)
        wait_ready(f"http://127.0.0.1:{echo_port}/", echo)
        check_nereid(nereid_port, body.encode())
        rounds: list[dict[str, float]] = []
        with tempfile.TemporaryDirectory(prefix="nereid-bench-") as tmp:
            script = lua_script(Path(tmp), body)
            # Alternate the two servers so that a noisy neighbour affects both alike.
            for _ in range(args.rounds):
                results: dict[str, float] = {}
                for name, port in (("nereid", nereid_port), ("echo", echo_port)):
                    url = f"http://127.0.0.1:{port}{INFER_PATH}"
                    if args.warmup > 0:
                        run_wrk(wrk, url, script, args.warmup, args.connections)
                    results[name] = run_wrk(wrk, url, script, args.duration, args.connections)
                rounds.append(results)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        stop(nereid)
        stop(echo)

    print(f"wrk -t2 -c{args.connections} -d{args.duration}s, POST {INFER_PATH} ({len(body)} byte JSON body)")
    print(f"  {'round':<6} {'nereid req/s':>13} {'echo req/s':>11} {'ratio':>7}")
    ratios = []
    for i, results in enumerate(rounds, 1):
        ratios.append(results["nereid"] / results["echo"])
        print(f"  {i:<6} {results['nereid']:>13.0f} {results['echo']:>11.0f} {ratios[-1]:>7.3f}")
    ratio = statistics.median(ratios)
    print(f"  median ratio nereid/echo = {ratio:.3f}  (target >= {TARGET})")
    print(f"verdict: target {'MET' if ratio >= TARGET else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
