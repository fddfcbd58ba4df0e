"""One job in a forked child, as ``supervisor run`` runs it: the real child runtime
(``workers.child.child_main``: boot, heartbeat, output capture, soft timeout, the
reaper), spoken to over its two pipes with the real frames. The test process stands in
for the parent: it sends the RUN, reads START, heartbeats and the answer, enforces the
hard timeout, and words a death as the pool does."""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable

from shared import defaults, wire
from shared.exitcodes import describe_child_exit
from shared.frames import FrameReader
from shared.jobs import FAIL_CRASHED, FAIL_TIMEOUT, ClaimedJob

Answer = wire.Done | wire.Failed
EXIT_WAIT = 10.0  # seconds a child that answered may take to exit before it is killed


def run_forked(job: ClaimedJob, timeout: float | None,
               progressed: Callable[[dict], None],
               checkpointed: Callable[[str], None] | None = None) -> Answer:
    """Run ``job`` in a child forked for it; return its answer, or the failure the pool
    records for a child that died (``crashed``) or ran past ``timeout`` seconds
    (``timeout``, its process group killed). ``progressed`` gets each progress report
    the child's heartbeat carries, ``checkpointed`` each checkpoint's JSON text (written
    before a flushed one is answered)."""
    from workers.child import ChildConfig, child_main

    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    parent = os.getpid()
    # max_jobs=1: the child answers with its exit announced and leaves, as a child at its
    # recycle limit does; a STOP sent behind the RUN would be read before the job starts.
    config = ChildConfig(worker_no=1, parent_pid=parent, read_fd=to_child_r,
                         write_fd=from_child_w, max_jobs=1)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's side runs in the fork
        try:
            child_main(config)
        finally:
            os._exit(70)
    os.close(to_child_r)
    os.close(from_child_w)
    try:
        wire.write_all(to_child_w, wire.Run.pack(job.id, job.kind, job.queue, job.attempt,
                                                 job.max_attempts, job.args_json,
                                                 job.trace_context, job.checkpoint,
                                                 job.expires_at))
        answer = _read_answer(pid, from_child_r, job, timeout, progressed,
                              checkpointed, to_child_w)
    except BaseException:  # Ctrl-C or a test's timeout while the child runs: it goes too
        _kill_group(pid)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(to_child_w)
        os.close(from_child_r)
    if answer is not None:
        _reap(pid, EXIT_WAIT)
        return answer
    return wire.Failed(job.id, FAIL_CRASHED, _reap(pid, EXIT_WAIT))


def _read_answer(pid: int, fd: int, job: ClaimedJob, timeout: float | None,
                 progressed: Callable[[dict], None],
                 checkpointed: Callable[[str], None] | None, to_child: int) -> Answer | None:
    """The child's answer for ``job``, a timeout failure, or None when the child closed
    its pipe without answering (it died)."""
    reader = FrameReader(defaults.MAX_FRAME_BYTES)
    deadline = None  # armed at START, as the pool arms it
    while True:
        wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        readable, _, _ = select.select([fd], [], [], wait)
        if not readable:
            _kill_group(pid)
            return wire.Failed(job.id, FAIL_TIMEOUT, f"ran past its {timeout:g} s timeout")
        data = os.read(fd, 65536)
        if not data:
            return None
        for frame in reader.feed(data):
            message = wire.decode(frame)
            if isinstance(message, wire.Start):
                if timeout:
                    deadline = time.monotonic() + timeout
            elif isinstance(message, wire.Heartbeat):
                if message.progress is not None:
                    progressed(message.progress)
            elif isinstance(message, wire.Checkpoint):
                if checkpointed is not None:
                    checkpointed(message.state.decode())
                if message.flush:  # the handler waits for this
                    wire.write_all(to_child, wire.Checkpointed(message.job).encode())
            elif isinstance(message, wire.Done | wire.Failed):
                return message
            elif isinstance(message, wire.BootError):
                return wire.Failed(job.id, FAIL_CRASHED,
                                   f"child failed to boot ({message.kind}): {message.message}")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(pid: int, within: float) -> str:
    """Wait for the child (killing its group after ``within`` seconds); its exit in
    words. Anything its handler left running in its group goes with it."""
    pidfd = os.pidfd_open(pid)
    try:
        exited, _, _ = select.select([pidfd], [], [], within)
    finally:
        os.close(pidfd)
    if not exited:
        _kill_group(pid)
    _, status = os.waitpid(pid, 0)
    _kill_group(pid)
    return f"child {describe_child_exit(status)}"
