"""What an open console costs inference: wrk throughput of `simple` with the live page polling and without.

The console's live page asks for one snapshot a second (GET /console/api/live). Rounds alternate
between "closed" (no poller) and "open" (a poller doing exactly that; with --browser, headless Chromium
showing the live page itself), and the script prints each round, the medians and open/closed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _common import EXAMPLES, SIMPLE_BODY, free_port, require_binary, start_nereid, stop, wait_ready
from http_vs_echo import INFER_PATH, lua_script, run_wrk


class Poller:
    """Polls the live snapshot once a second, as the page does (or drives the page itself)."""

    def __init__(self, port: int, browser: bool) -> None:
        self._url = f"http://127.0.0.1:{port}"
        self._browser = browser
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.polls: list[float] = []  # seconds each snapshot took, as the client saw it
        self._thread = threading.Thread(target=self._run_browser if browser else self._run, daemon=True)

    def __enter__(self) -> Poller:
        self._thread.start()
        self._ready.wait(60)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        self._ready.set()
        while not self._stop.is_set():
            started = time.perf_counter()
            with urllib.request.urlopen(f"{self._url}/console/api/live", timeout=5) as response:
                json.loads(response.read())
            self.polls.append(time.perf_counter() - started)
            self._stop.wait(1.0)

    def _run_browser(self) -> None:
        from playwright.sync_api import sync_playwright

        executable = shutil.which("chromium") or shutil.which("chromium-browser")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(f"{self._url}/console#/live/simple")
            page.locator('[data-testid="chart-throughput"] canvas').wait_for()
            self._ready.set()
            while not self._stop.is_set():
                page.wait_for_timeout(200)
            browser.close()


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def snapshot_cpu_ms(count: int = 200) -> float:
    """CPU time of one snapshot of the bundled examples (four models), measured in this process."""
    from nereid.frontends.console.source import ConsoleSource
    from nereid.server import build_engine
    from nereid.settings import ServerSettings

    engine = build_engine(ServerSettings(model_repositories=(EXAMPLES,)))
    try:
        source = ConsoleSource(engine)
        source.snapshot()
        started = time.process_time()
        for _ in range(count):
            json.dumps(source.snapshot())
        return (time.process_time() - started) / count * 1000
    finally:
        engine.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=int, default=3, help="seconds per round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each, alternating")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--browser", action="store_true", help="poll with headless Chromium on the live page")
    args = parser.parse_args()
    wrk = require_binary("wrk", "wrk")
    port = free_port()
    server = start_nereid(port)
    try:
        wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", server)
        url = f"http://127.0.0.1:{port}{INFER_PATH}"
        with tempfile.TemporaryDirectory() as directory:
            script = lua_script(Path(directory), json.dumps(SIMPLE_BODY))
            run_wrk(wrk, url, script, 1, args.connections)  # warm-up
            closed, opened, polls = [], [], []
            cpu: dict[bool, list[float]] = {False: [], True: []}  # server CPU microseconds per request

            def measure(console_open: bool) -> float:
                before = _cpu_seconds(server.pid)
                rate = run_wrk(wrk, url, script, args.duration, args.connections)
                cpu[console_open].append((_cpu_seconds(server.pid) - before) / (rate * args.duration) * 1e6)
                return rate

            for round_ in range(args.rounds):
                # closed first in odd rounds, open first in even ones, so that a drift in the machine's
                # load does not favour either
                for console_open in (False, True) if round_ % 2 == 0 else (True, False):
                    if not console_open:
                        closed.append(measure(False))
                        continue
                    with Poller(port, args.browser) as poller:
                        opened.append(measure(True))
                    polls += poller.polls
                print(
                    f"round {round_ + 1}: closed {closed[-1]:8.0f} req/s {cpu[False][-1]:6.1f} us CPU/req   "
                    f"open {opened[-1]:8.0f} req/s {cpu[True][-1]:6.1f} us CPU/req"
                )
    finally:
        stop(server)
    ratio = statistics.median(opened) / statistics.median(closed)
    print(f"median: closed {statistics.median(closed):.0f} req/s, open {statistics.median(opened):.0f} req/s")
    print(f"open/closed: {ratio:.3f}")
    closed_cpu, open_cpu = statistics.median(cpu[False]), statistics.median(cpu[True])
    print(
        f"server CPU per request: closed {closed_cpu:.1f} us, open {open_cpu:.1f} us, "
        f"open/closed {open_cpu / closed_cpu:.3f}"
    )
    if polls:
        print(f"snapshot under load: median {statistics.median(polls) * 1000:.1f} ms over {len(polls)} polls")
    cpu = snapshot_cpu_ms()
    print(f"snapshot CPU, four models: {cpu:.2f} ms, i.e. {cpu / 10:.3f}% of one core at one poll a second")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
