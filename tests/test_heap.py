"""The garbage collector as the server sets it (nereid/heap.py): collected and frozen once the models are
loaded, a larger youngest generation, and a full collection after a version unloads while serving.

The collector's settings belong to the process, so the module's own cases run in a fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import tritonclient.http as httpclient

from tests.conftest import ROOT, start_nereid, stop

_CASES = r"""
import gc, weakref
from nereid import heap

class Node:
    pass

def cycle():
    node = Node()
    node.self = node
    return node

default = gc.get_threshold()
frozen = gc.get_freeze_count()  # not always 0: an interpreter may freeze some at start-up
heap.version_unloaded()  # not settled: nothing changes
assert gc.get_freeze_count() == frozen and gc.get_threshold() == default

garbage = weakref.ref(cycle())  # unreachable already: collected by `settle`, not frozen
kept = [cycle()]
held = weakref.ref(kept[0])
heap.settle()
assert garbage() is None
assert gc.get_freeze_count() > frozen and gc.get_threshold() == (heap.YOUNG_THRESHOLD, *default[1:])

kept.clear()  # a frozen cycle left unreachable (an unloaded model's module, say)
gc.collect()
assert held() is not None, "a full collection does not free what is frozen"
heap.version_unloaded()
assert held() is None and gc.get_freeze_count() > 0

heap.thaw()
assert gc.get_freeze_count() == 0
heap.version_unloaded()  # the server stopping: no more collections
assert gc.get_freeze_count() == 0
print("ok")
"""


def test_settle_freezes_what_survives_and_an_unloaded_version_is_collected() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CASES], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_the_server_settles_its_heap_when_ready_and_again_after_an_unload(tmp_path: Path) -> None:
    frozen = r"garbage collector: \d+ objects frozen in [0-9.]+ ms"
    running = start_nereid(
        ROOT / "examples" / "python_model_repository",
        tmp_path / "server.log",
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        "--backend-config=python,execution-mode=thread",
        "--log-verbose=1",
    )
    try:
        assert len(re.findall(frozen, running.log())) == 1  # ready: settled once, after the load
        httpclient.InferenceServerClient(running.url).unload_model("add_sub")
        deadline = time.monotonic() + 30
        while len(re.findall(frozen, running.log())) < 2:
            assert time.monotonic() < deadline, running.log()[-2000:]
            time.sleep(0.05)
    finally:
        stop(running.process)
