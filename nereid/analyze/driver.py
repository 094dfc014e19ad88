"""One running Nereid, driven as a user would: the load API with config overrides, the statistics API,
and the server's processes read from /proc (CPU seconds and resident memory, its workers included).

The analyzer starts the server itself in explicit model-control mode, or drives one already running
(`--url`); without the server's process id it then cannot read CPU or memory, and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from nereid.analyze.measure import ServerUsage
from nereid.analyze.search import CandidateFailed

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


def _processes() -> dict[int, int]:
    """pid -> parent pid of every process now."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:  # ended meanwhile
            continue
        found[int(entry)] = int(text[text.rindex(")") + 2 :].split()[1])  # field 4, after the name
    return found


def process_tree(root: int) -> list[int]:
    """`root` and all its descendants now (the Python backend's workers among them)."""
    children: dict[int, list[int]] = {}
    for pid, parent in _processes().items():
        children.setdefault(parent, []).append(pid)
    tree, frontier = [root], [root]
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in tree:
                tree.append(child)
                frontier.append(child)
    return tree


def _usage(pids: list[int]) -> tuple[float, float]:
    """CPU seconds and resident MB of `pids` together (those that ended meanwhile left out)."""
    cpu = rss = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        cpu += (int(fields[11]) + int(fields[12])) * _TICK_S
        rss += int(fields[21]) * _PAGE_MB
    return cpu, rss


class ServerDriver:
    def __init__(self, http_url: str, grpc_url: str | None, pid: int | None) -> None:
        self.http_url, self.grpc_url, self.pid = http_url, grpc_url, pid
        self._process: subprocess.Popen[bytes] | None = None
        self._tree: list[int] = [] if pid is None else [pid]

    @classmethod
    def start(
        cls, repository: Path, ports: tuple[int, int], log_path: Path, timeout_s: float = 120.0
    ) -> ServerDriver:
        """A Nereid of this Python on 127.0.0.1, explicit mode, no model loaded yet."""
        http_port, grpc_port = ports
        command = [
            sys.executable,
            "-m",
            "nereid",
            f"--model-repository={repository}",
            "--model-control-mode=explicit",
            f"--http-port={http_port}",
            f"--grpc-port={grpc_port}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--allow-metrics=false",
        ]
        log = open(log_path, "ab")  # noqa: SIM115 (kept open while the server runs)
        # its own session: a Ctrl-C at the terminal interrupts the analyzer, which then stops the server
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        driver = cls(f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}", process.pid)
        driver._process = process
        deadline = time.monotonic() + timeout_s
        while not driver.ready():
            if process.poll() is not None or time.monotonic() > deadline:
                driver.stop()
                raise RuntimeError(f"the server did not start; its log: {log_path}")
            time.sleep(0.1)
        return driver

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 300) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://{self.http_url}{path}", data=data, method=method)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
        return json.loads(text) if text else None

    def ready(self) -> bool:
        try:
            self._call("GET", "/v2/health/ready", timeout=2)
            return True
        except (OSError, ValueError):
            return False

    def load(self, model: str, config: dict[str, Any] | None = None) -> None:
        """Load (or reload) `model`, with `config` overriding its config.pbtxt; CandidateFailed with the
        server's reason when it refuses."""
        body = {"parameters": {"config": json.dumps(config)}} if config is not None else {}
        try:
            self._call("POST", f"/v2/repository/models/{model}/load", body)
        except urllib.error.HTTPError as exc:
            try:
                reason = json.loads(exc.read()).get("error", "")
            except ValueError:
                reason = str(exc)
            raise CandidateFailed(f"model '{model}' failed to load: {reason}") from None
        finally:
            # The processes read during measurements, found once per load (a /proc scan is too slow for
            # the window's edge, where it would delay the load generator).
            if self.pid is not None:
                self._tree = process_tree(self.pid)

    def config(self, model: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v2/models/{model}/config"))

    def inferences(self, model: str) -> int:
        stats = self._call("GET", f"/v2/models/{model}/stats")["model_stats"]
        return sum(int(s["inference_stats"]["success"]["count"]) for s in stats)

    def usage(self, model: str) -> ServerUsage:
        cpu, rss = _usage(self._tree)
        return ServerUsage(cpu, rss, self.inferences(model))

    def repository_models(self) -> list[str]:
        return [entry["name"] for entry in self._call("POST", "/v2/repository/index", {})]
