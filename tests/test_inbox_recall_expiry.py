"""The child's inbox (issue 28): while a job runs, ``skim`` answers a SKIP for a queued
job at once (the heartbeat thread calls it), never the answers the main loop holds; and
a job whose expires_at passed while queued is passed over with FAILED ``expired``."""

from __future__ import annotations

import os
import time

import pytest

from shared import wire
from shared.jobs import FAIL_EXPIRED
from workers.inbox import JobInbox

pytestmark = pytest.mark.timeout(10)


def run(job_id: int, expires_at: float | None = None) -> bytes:
    return wire.Run(job_id, "k", "default", 1, 5, "{}", expires_at=expires_at).encode()


@pytest.fixture
def pipe():
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield r, w
    os.close(r)
    os.close(w)


def frames(data: bytes) -> list:
    return [wire.decode(f) for f in wire.FrameReader().feed(data)]


def test_skim_drops_a_skipped_queued_job_and_answers_at_once(pipe):
    r, w = pipe
    inbox = JobInbox(r)
    os.write(w, run(1) + run(2) + run(3))
    inbox.poll()
    assert inbox.next_run().id == 1  # the running job
    os.write(w, wire.Skip(3).encode())
    said = frames(inbox.skim())
    assert [(type(m).__name__, m.job) for m in said] == [("Skipped", 3)]
    assert inbox.next_run().id == 2
    assert inbox.next_run() is None
    assert inbox.take_dropped() == b""  # answered once, by skim


def test_skim_leaves_the_main_loops_answers_to_it(pipe):
    r, w = pipe
    inbox = JobInbox(r)
    os.write(w, run(1) + wire.Skip(1).encode() + run(2))
    inbox.poll()
    assert inbox.next_run().id == 2  # 1 passed over: its SKIPPED is the main loop's
    assert inbox.skim() == b""
    assert [m.job for m in frames(inbox.take_dropped())] == [1]


def test_a_job_that_expired_in_the_pipe_never_starts(pipe):
    r, w = pipe
    inbox = JobInbox(r)
    os.write(w, run(1, expires_at=time.time() - 1) + run(2, expires_at=time.time() + 600)
             + run(3))
    inbox.poll()
    assert inbox.next_run().id == 2
    (answer,) = frames(inbox.take_dropped())
    assert (type(answer).__name__, answer.job, answer.kind) == ("Failed", 1, FAIL_EXPIRED)
    assert inbox.next_run().id == 3


def test_the_run_frame_carries_expires_at_only_when_set():
    plain = wire.Run.decode(wire.FrameReader().feed(run(1))[0])
    assert plain.expires_at is None
    timed = wire.Run.decode(wire.FrameReader().feed(run(1, expires_at=1234.5))[0])
    assert timed.expires_at == 1234.5 and timed.args == {}


def test_a_skip_that_crossed_its_jobs_start_does_not_skip_the_jobs_next_attempt(pipe):
    # The parent asks back job 7 (a recall) just as the child takes it: the SKIP
    # arrives after the RUN left the queue, and the parent learns from the START that
    # the job runs here. Job 7 fails by design and is claimed again, and its next
    # attempt is sent to the same child. A stale SKIP passed that attempt over, the
    # parent (no recall pending) ignored the SKIPPED, kept it as the head of the queue
    # forever and dropped every later START and answer of that child as out of order,
    # so those jobs ran again elsewhere (the chaos soak's "attempt 2 ran 2 times").
    r, w = pipe
    inbox = JobInbox(r)
    os.write(w, run(7))
    inbox.poll()
    assert inbox.next_run().id == 7  # started: the SKIP below is too late
    os.write(w, wire.Skip(7).encode())
    assert inbox.skim() == b""
    assert inbox.next_run() is None
    assert inbox.take_dropped() == b""
    os.write(w, run(7) + run(8))  # the next attempt of job 7, then another job
    inbox.poll()
    assert inbox.next_run().id == 7
    assert inbox.next_run().id == 8
    assert inbox.take_dropped() == b""


class _ThreadReadsInTheWindow:
    """A poller whose ``poll`` first lets the "heartbeat thread" read (``read``: its
    ``skim`` or its ``look``) in the window between ``wait``'s check and its block, with
    the next RUN just written, then blocks for at most a second and records what it
    saw."""

    def __init__(self, inbox: JobInbox, write_fd: int, read) -> None:
        self.inbox, self.write_fd, self.read, self.real = inbox, write_fd, read, inbox._poller
        self.events: list | None = None

    def poll(self, timeout=None):
        if self.events is None:
            os.write(self.write_fd, run(7))
            self.read()
            self.events = self.real.poll(1000)
            return self.events
        return self.real.poll(timeout)


@pytest.mark.parametrize("reader", ["skim", "look"])
def test_a_read_by_the_heartbeat_thread_never_leaves_wait_blocked_on_an_empty_pipe(
        pipe, reader):
    r, w = pipe
    inbox = JobInbox(r)
    window = _ThreadReadsInTheWindow(inbox, w, getattr(inbox, reader))
    inbox._poller = window
    inbox.wait()
    # The RUN stayed on the pipe for the waiting loop: its block woke on it, not at
    # the second's end with the job already taken into the queue behind its back.
    assert window.events, "the thread took the RUN while wait was about to block"
    assert inbox.next_run().id == 7
