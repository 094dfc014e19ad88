"""The cyclic garbage collector, set for a server: many requests in flight, a large heap that lives as
long as the process.

With Python's default thresholds a collection of the youngest generation runs every 700 container
objects allocated and not yet freed. Every request in flight holds some twenty of them, so from about
thirty requests in flight on, collections run back to back, each moving the requests' objects one
generation up, and every few hundred of them a full collection walks the whole heap: the server's
modules, its models' code and the libraries they import, hundreds of thousands of objects, for about
20 ms with the GIL held. perf_analyzer at concurrency 64 against a batched Python model kept the server
in the collector for 3 to 5 microseconds a request that way.

So the server, once its models are loaded, collects once and freezes what is left (`gc.freeze`: the
collector no longer walks it) and lets the youngest generation grow to `YOUNG_THRESHOLD` objects, well
above what requests in flight hold. A version unloaded while serving may leave frozen cycles behind (a
Python model's module and its functions): its unloading unfreezes the heap, collects, and freezes again.

Only the `nereid` command does this (`settle`); a process that embeds the engine keeps its own settings.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

log = logging.getLogger(__name__)

YOUNG_THRESHOLD = 10_000  # Python's default is 700

_lock = threading.Lock()
_settled = False  # whether `settle` ran (and `thaw` did not since)


def settle() -> None:
    """After the models that start with the server are loaded: collect, freeze what is left, and let the
    youngest generation grow to YOUNG_THRESHOLD objects."""
    global _settled
    with _lock:
        _, middle, old = gc.get_threshold()
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)
        _refreeze()
        _settled = True


def version_unloaded() -> None:
    """A model version stopped: what it held may be frozen cycles now, which only a full collection of
    the unfrozen heap frees. Nothing to do where the server did not settle the heap."""
    with _lock:
        if _settled:
            gc.unfreeze()
            _refreeze()


def thaw() -> None:
    """The server stops: the heap is the collector's again (finalizers of cycles may run at exit)."""
    global _settled
    with _lock:
        _settled = False
        gc.unfreeze()


def _refreeze() -> None:
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.debug(
        "garbage collector: %d objects frozen in %.1f ms",
        gc.get_freeze_count(),
        (time.perf_counter() - started) * 1000,
    )
