"""When a worker polls for its next frame: only after an execution the server sent with nothing ahead of
it (a server with requests queued keeps the worker fed and is busy itself), and only while frames have
been coming soon enough for it to pay."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from nereid.backends.python.worker import wire
from nereid.backends.python.worker.stub import Worker


@pytest.fixture
def worker() -> Iterator[tuple[Worker, socket.socket, list[float]]]:
    ours, theirs = socket.socketpair()
    worker = Worker(theirs)
    worker._busy_wait_s = 0.0005
    polls: list[float] = []
    worker._poll = polls.append  # type: ignore[method-assign]
    yield worker, ours, polls
    ours.close()
    theirs.close()


@pytest.mark.parametrize(
    ("poll_after", "gap_s", "polled"), [(True, 0.0, True), (False, 0.0, False), (True, 1.0, False)]
)
def test_the_worker_polls_only_after_an_execution_sent_alone_and_while_frames_come_soon(
    worker: tuple[Worker, socket.socket, list[float]], poll_after: bool, gap_s: float, polled: bool
) -> None:
    stub, server, polls = worker
    stub._poll_after = poll_after
    stub._gap_s = gap_s
    wire.send(server, wire.encode((wire.IS_READY, 1)))
    assert stub._next() == (wire.IS_READY, 1)
    assert polls == ([0.0005] if polled else [])


class _NoRequests:
    def execute(self, requests: list[object]) -> list[object]:
        return []


def test_an_execute_frame_says_whether_to_poll_after_it(
    worker: tuple[Worker, socket.socket, list[float]],
) -> None:
    stub, server, _ = worker
    stub._model = _NoRequests()
    stub._arena_size = 1 << 16
    reader = wire.FrameReader()
    for seq, alone in enumerate((True, False, True)):
        stub._execute((wire.EXECUTE, seq, 0, 0, (), alone))
        ((kind, answered, slot, _, results),) = wire.receive(server, reader)  # type: ignore[misc]
        assert (kind, answered, slot, results) == (wire.RESULT, seq, 0, ())
        assert stub._poll_after is alone
