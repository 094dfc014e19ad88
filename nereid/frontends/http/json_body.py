"""Request bodies read as JSON, however deeply nested.

orjson refuses documents nested deeper than 1024 levels; Triton's reader has no such bound, so a deep
value reaches the check of the member that holds it (a `ready` that is not a boolean, a tensor's 'data'
past 100 levels...) and is refused with that member's error. For those rare documents only, the standard
library's pure-Python decoder reads the body: its recursion is made of Python frames, which live on the
heap, so the recursion limit may be raised for it without risk to the thread's stack. Before Python 3.11
each of those calls also took C stack, and a deep enough document would overflow it and crash the
server: there orjson's bound stands, and a deeper document is refused as JSON the reader cannot read.
"""

from __future__ import annotations

import json
import json.scanner
import sys
import threading
from typing import Any

import orjson

# Bounds what a deep document may cost: the decoder keeps two frames a level (about 0.7 KiB), so 256 Ki
# levels take some 200 MiB and a second or two.
MAX_DEEP_BRACKETS = 1 << 18

_DEPTH_ERROR = "depth limit exceeded"
DEEP_READS = sys.version_info >= (3, 11)  # Python frames off the C stack (see above)
_decoder = json.JSONDecoder()
_decoder.scan_once = json.scanner.py_make_scanner(_decoder)  # type: ignore[attr-defined]
_limit_lock = threading.Lock()  # the recursion limit is the process's: one deep read at a time


def loads(body: bytes | str) -> Any:
    """`body` as JSON; raises orjson.JSONDecodeError, with the position of the error, as orjson does."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if not DEEP_READS or not str(exc).startswith(_DEPTH_ERROR):
            raise
    return _deep_loads(body)


def _deep_loads(body: bytes | str) -> Any:
    if isinstance(body, (bytes, bytearray, memoryview)):
        body = bytes(body).decode("utf-8")  # orjson read it this far, so it is valid UTF-8
    brackets = body.count("[") + body.count("{")
    if brackets > MAX_DEEP_BRACKETS:
        raise orjson.JSONDecodeError(
            f"{_DEPTH_ERROR} (more than {MAX_DEEP_BRACKETS} arrays and objects)", body, 0
        )
    with _limit_lock:
        previous = sys.getrecursionlimit()
        sys.setrecursionlimit(previous + 2 * brackets + 100)
        try:
            return _decoder.decode(body)
        except json.JSONDecodeError as exc:
            raise orjson.JSONDecodeError(exc.msg, exc.doc, exc.pos) from None
        finally:
            sys.setrecursionlimit(previous)
