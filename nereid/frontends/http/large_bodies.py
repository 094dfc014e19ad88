"""Large JSON infer bodies are decoded in a helper process, one at a time.

Decoding 60 MiB of JSON takes seconds and builds Python objects several times the body's size. On the
event loop it would hold up every other client for those seconds, and a thread would not help: the JSON
parser keeps the GIL for the whole document. In a helper process the loop stays free, the server's own
memory grows only by the body and the decoded tensors (both in proportion to the body), and decoding one
body at a time bounds the helper's peak to one document's objects.
"""

from __future__ import annotations

import asyncio
import copy
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from nereid.errors import InternalError, NereidError
from nereid.frontends.http.codec import decode_infer_request
from nereid.types import InferRequest

# JSON bodies at least this large go to the helper; below it, the round trip costs more than it saves.
OFF_LOOP_FROM = 1 << 20


class LargeBodyDecoder:
    """A helper process, started on the first large body, that decodes JSON infer requests."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    async def decode(self, body: bytes, header_length: int | None, name: str, version: str) -> InferRequest:
        if self._pool is None:
            # spawn, not fork: the server has threads, and a forked copy of their locks can deadlock
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(
                self._pool, decode_infer_request, body, header_length, name, version
            )
        except BrokenProcessPool:
            self.close()  # the next large body starts a new helper
            raise InternalError("the process decoding large request bodies stopped unexpectedly") from None
        except NereidError as exc:
            # The executor's future and the loop's hold each other, and this error, until the cyclic
            # collector runs (rarely: heap.py), and its traceback would hold the frames that hold the body:
            # a megabyte or more per refused request. The request is answered with a copy, the frames let go.
            exc.__traceback__ = None
            raise copy.copy(exc) from None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
