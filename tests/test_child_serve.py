"""The child's side of its pipe, without the pool: the inbox (``workers/inbox.py``) over
a socketpair in this process, and the serve loop (``JobRunner.serve``, the real one)
in a plain fork of this process over two socketpairs, the test playing the parent frame
by frame. What is pinned is the order the parent relies on: each job's START before its
handler runs, SKIPPED for a skipped job between the answer before it and the START
after it, answers in queue order, nothing started after STOP, the last answer of a
recycled child flagged as last."""

from __future__ import annotations

import os
import select
import signal
import socket

import pytest

from shared import wire
from shared.exitcodes import CHILD_OK, CHILD_RECYCLE
from workers import job
from workers.child import ChildConfig, JobRunner
from workers.inbox import JobInbox

pytestmark = pytest.mark.timeout(20)


@job(name="serve_echo")
def serve_echo(n: int) -> int:
    return n


@job(name="serve_boom")
def serve_boom() -> None:
    raise ValueError("boom")


@job(name="serve_gate")
def serve_gate(fd: int) -> str:
    """Runs until the test writes a byte to the gate: meanwhile the test plays the
    parent sending frames behind the running job."""
    os.read(fd, 1)
    return "through"


def run_frame(job_id: int, kind: str = "serve_echo", args: str | None = None) -> bytes:
    if args is None:
        args = f'{{"n": {job_id}}}' if kind == "serve_echo" else "{}"
    return wire.Run.pack(job_id, kind, "q", 1, 5, args)


def skip(job_id: int) -> bytes:
    return wire.Skip(job_id).encode()


STOP = wire.Stop().encode()


# -- the inbox, in this process -------------------------------------------------------

@pytest.fixture
def inbox_pair():
    parent, child = socket.socketpair()
    child.setblocking(False)
    yield parent, JobInbox(child.fileno())
    parent.close()
    child.close()


def test_the_inbox_hands_out_queued_runs_in_order_and_nothing_when_empty(inbox_pair):
    parent, inbox = inbox_pair
    inbox.poll()
    assert inbox.next_run() is None and not inbox.stopped and not inbox.closed
    parent.sendall(run_frame(1) + run_frame(2) + run_frame(3))
    inbox.poll()
    assert inbox.queued == 3
    assert [inbox.next_run().id for _ in range(3)] == [1, 2, 3]
    assert inbox.next_run() is None and inbox.take_dropped() == b""


def test_a_frame_split_across_reads_waits_for_its_end(inbox_pair):
    parent, inbox = inbox_pair
    frame = run_frame(7)
    parent.sendall(frame[:10])
    inbox.poll()
    assert inbox.next_run() is None
    parent.sendall(frame[10:])
    inbox.wait()
    assert inbox.next_run().id == 7


def test_more_than_one_read_of_frames_is_taken_in_one_poll(inbox_pair):
    parent, inbox = inbox_pair
    parent.setblocking(False)
    ids = range(1000, 4000)  # four digits each: every frame the same length
    size = len(run_frame(1000))
    sent = parent.send(b"".join(run_frame(i) for i in ids))
    assert sent > 2 * 65536  # more than one read of the child's
    inbox.poll()
    assert inbox.queued == sent // size  # every whole frame sent, in one poll
    assert [inbox.next_run().id for _ in range(3)] == [1000, 1001, 1002]


def test_a_skipped_job_is_passed_over_and_reported_once(inbox_pair):
    parent, inbox = inbox_pair
    parent.sendall(run_frame(1) + run_frame(2) + run_frame(3) + skip(2))
    inbox.poll()
    assert inbox.next_run().id == 1
    assert inbox.take_dropped() == b""  # job 2 is not passed over yet
    assert inbox.next_run().id == 3
    frames = wire.FrameReader().feed(inbox.take_dropped())
    assert [wire.decode(f) for f in frames] == [wire.Skipped(2)]
    assert inbox.take_dropped() == b""


def test_stop_leaves_queued_runs_unstarted(inbox_pair):
    parent, inbox = inbox_pair
    parent.sendall(run_frame(1) + run_frame(2))
    inbox.poll()
    assert inbox.next_run().id == 1
    parent.sendall(STOP)
    inbox.poll()
    assert inbox.stopped and inbox.next_run() is None and inbox.queued == 1


def test_wait_returns_on_stop_without_a_job(inbox_pair):
    parent, inbox = inbox_pair
    parent.sendall(STOP)
    inbox.wait()
    assert inbox.stopped and inbox.next_run() is None


def test_wait_returns_at_end_of_file(inbox_pair):
    parent, inbox = inbox_pair
    parent.close()
    inbox.wait()
    assert inbox.closed and not inbox.stopped and inbox.next_run() is None


# -- the serve loop, in a fork --------------------------------------------------------

class Served:
    """A fork of this process running ``JobRunner(config).serve()`` on socketpairs;
    the test plays its parent."""

    def __init__(self, *frames: bytes, max_jobs: int | None = None) -> None:
        self.gate_r, self.gate_w = os.pipe()
        down_parent, down_child = socket.socketpair()
        up_child, up_parent = socket.socketpair()
        # Frames written before the fork are all there at the child's first read.
        down_parent.sendall(b"".join(frames))
        self.pid = os.fork()
        if self.pid == 0:
            code = 70
            try:
                down_parent.close()
                up_parent.close()
                config = ChildConfig(worker_no=1, parent_pid=os.getppid(),
                                     read_fd=down_child.detach(), write_fd=up_child.detach(),
                                     heartbeat_interval=600.0, max_jobs=max_jobs)
                code = JobRunner(config).serve()
            finally:
                os._exit(code)
        down_child.close()
        up_child.close()
        self.down = down_parent
        self.up = up_parent
        self.reader = wire.FrameReader()
        self.heard: list[wire.Message] = []
        self.status: int | None = None

    def send(self, data: bytes) -> None:
        self.down.sendall(data)

    def open_gate(self) -> None:
        os.write(self.gate_w, b"x")

    def hear(self, n: int, timeout: float = 10.0) -> list[wire.Message]:
        """The next ``n`` messages the child sends."""
        while len(self.heard) < n:
            ready, _, _ = select.select([self.up], [], [], timeout)
            assert ready, f"the child said only {self.heard}"
            data = self.up.recv(65536)
            assert data, f"the child closed its pipe after {self.heard}"
            self.heard += [wire.decode(f) for f in self.reader.feed(data)]
        taken, self.heard = self.heard[:n], self.heard[n:]
        return taken

    def exit_code(self, timeout: float = 10.0) -> int:
        """Its exit code; everything it said before is left in ``heard``."""
        while True:
            ready, _, _ = select.select([self.up], [], [], timeout)
            assert ready, "the child did not exit"
            data = self.up.recv(65536)
            if not data:
                break
            self.heard += [wire.decode(f) for f in self.reader.feed(data)]
        _pid, status = os.waitpid(self.pid, 0)
        self.status = status
        assert os.WIFEXITED(status), status
        return os.WEXITSTATUS(status)

    def close(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
        for fd in (self.gate_r, self.gate_w):
            os.close(fd)
        self.down.close()
        self.up.close()


@pytest.fixture
def serve():
    made: list[Served] = []

    def start(*frames: bytes, max_jobs: int | None = None) -> Served:
        child = Served(*frames, max_jobs=max_jobs)
        made.append(child)
        return child

    yield start
    for child in made:
        child.close()


def said(messages: list[wire.Message]) -> list[tuple[str, int | None]]:
    """``("START", 1)``, ``("DONE", 1)``...: what each message was and for which job."""
    out = []
    for m in messages:
        name = type(m).__name__.upper()
        out.append((name, getattr(m, "job", getattr(m, "id", None))
                    if name != "READY" else None))
    return out


def test_queued_jobs_start_and_answer_in_queue_order(serve):
    child = serve(run_frame(1), run_frame(2, "serve_boom"), run_frame(3))
    assert said(child.hear(7)) == [("READY", None), ("START", 1), ("DONE", 1),
                                   ("START", 2), ("FAILED", 2), ("START", 3), ("DONE", 3)]
    child.send(STOP)
    assert child.exit_code() == CHILD_OK and child.heard == []


def test_a_skipped_job_is_reported_between_the_answer_before_it_and_the_start_after(serve):
    child = serve(run_frame(1), run_frame(2), run_frame(3), skip(2))
    assert said(child.hear(6)) == [("READY", None), ("START", 1), ("DONE", 1),
                                   ("SKIPPED", 2), ("START", 3), ("DONE", 3)]
    child.send(STOP)
    assert child.exit_code() == CHILD_OK and child.heard == []


def test_a_skip_sent_while_a_job_runs_is_seen_before_the_next_start(serve):
    child = serve()
    gate = f'{{"fd": {child.gate_r}}}'
    child.send(run_frame(1, "serve_gate", gate) + run_frame(2) + run_frame(3))
    assert said(child.hear(2)) == [("READY", None), ("START", 1)]
    child.send(skip(2))
    child.open_gate()
    assert said(child.hear(4)) == [("DONE", 1), ("SKIPPED", 2), ("START", 3), ("DONE", 3)]
    child.send(STOP)
    assert child.exit_code() == CHILD_OK and child.heard == []


def test_stop_behind_queued_jobs_starts_none_of_them(serve):
    child = serve(run_frame(1), run_frame(2), STOP)
    assert child.exit_code() == CHILD_OK
    assert said(child.heard) == [("READY", None)]


def test_a_stop_sent_while_a_job_runs_lets_it_finish_and_starts_nothing_more(serve):
    child = serve()
    gate = f'{{"fd": {child.gate_r}}}'
    child.send(run_frame(1, "serve_gate", gate) + run_frame(2))
    assert said(child.hear(2)) == [("READY", None), ("START", 1)]
    child.send(STOP)
    child.open_gate()
    assert child.exit_code() == CHILD_OK
    (done,) = child.heard
    assert isinstance(done, wire.Done) and done.job == 1 and not done.last


def test_a_child_at_its_job_limit_flags_its_last_answer_and_leaves(serve):
    child = serve(run_frame(1), run_frame(2), run_frame(3), max_jobs=2)
    assert child.exit_code() == CHILD_RECYCLE
    assert said(child.heard) == [("READY", None), ("START", 1), ("DONE", 1),
                                 ("START", 2), ("DONE", 2)]
    assert [m.last for m in child.heard if isinstance(m, wire.Done)] == [False, True]


def test_end_of_file_from_the_parent_ends_an_idle_child(serve):
    child = serve(run_frame(1))
    assert said(child.hear(3)) == [("READY", None), ("START", 1), ("DONE", 1)]
    child.down.close()
    assert child.exit_code() == CHILD_OK
