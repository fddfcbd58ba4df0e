"""Job kinds for the chaos runs, loaded with ``--app scripts.chaos.handlers``.

Every handler records its start and (when it gets there) its end in the run log named
by ``CHAOS_RUNLOG``: one line ``S|E <job id> <attempt> <pid> <unix time> <parent pid>`` per
event,
written with one ``O_APPEND`` write so lines from many processes never interleave. The
checks read this log to see what really ran, instead of trusting the queue's own record.
"""

from __future__ import annotations

import os
import time

from workers import Discard, current_job, job

_fd_by_pid: dict[int, int] = {}


def _log_fd() -> int | None:
    # One descriptor per process: a child opens its own after the fork, so children
    # never share an offset (O_APPEND makes that moot, but a closed inherited fd would not).
    pid = os.getpid()
    fd = _fd_by_pid.get(pid)
    if fd is None:
        path = os.environ.get("CHAOS_RUNLOG")
        if not path:
            return None
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _fd_by_pid[pid] = fd
    return fd


def record(event: str) -> None:
    """Append ``event`` (``S`` start, ``E`` end) for the current job to the run log."""
    fd = _log_fd()
    if fd is None:
        return
    ctx = current_job()
    os.write(fd, f"{event} {ctx.id} {ctx.attempt} {os.getpid()} {time.time():.6f} "
                 f"{os.getppid()}\n".encode())


@job
def chaos_noop(n: int = 0) -> int:
    """Does nothing; returns ``n``."""
    record("S")
    record("E")
    return n


@job
def chaos_cpu(loops: int) -> int:
    """A short burst of pure-Python CPU work."""
    record("S")
    total = 0
    for i in range(loops):
        total += i * i % 7
    record("E")
    return total


@job
def chaos_sleep(ms: int) -> int:
    """Sleeps ``ms`` milliseconds: keeps children busy long enough to be killed."""
    record("S")
    time.sleep(ms / 1000)
    record("E")
    return ms


@job(max_attempts=5)
def chaos_flaky() -> str:
    """Raises on its first attempt, succeeds on any later one."""
    record("S")
    if current_job().attempt == 1:
        record("E")
        raise ValueError("flaky: fails on the first attempt by design")
    record("E")
    return "ok"


@job(max_attempts=2)
def chaos_fail() -> None:
    """Always raises: ends discarded once its two attempts are spent."""
    record("S")
    record("E")
    raise RuntimeError("fails on every attempt by design")


@job
def chaos_discard(reason: str = "discarded by design") -> None:
    """Gives up at once with ``Discard``."""
    record("S")
    record("E")
    raise Discard(reason)


@job(max_attempts=5)
def chaos_exit(on_attempt: int = 1, code: int = 7) -> str:
    """The child dies with ``os._exit(code)`` on attempt ``on_attempt``; no end record."""
    record("S")
    if current_job().attempt == on_attempt:
        os._exit(code)
    record("E")
    return "survived"


# Bad-input kinds: results the queue must refuse without losing the child.

@job(max_attempts=1)
def chaos_huge_result(size: int) -> str:
    """Returns a string of ``size`` characters (over the 1 MiB cap when asked)."""
    record("S")
    record("E")
    return "x" * size


@job(max_attempts=1)
def chaos_unserializable() -> object:
    """Returns a set, which JSON cannot hold."""
    record("S")
    record("E")
    return {1, 2, 3}


@job(max_attempts=1)
def chaos_nul_result() -> str:
    """Returns a string with a NUL, valid JSON that PostgreSQL's jsonb refuses."""
    record("S")
    record("E")
    return "a\x00b"


@job
def chaos_typed(a: int, b: int) -> int:
    """Takes exactly ``a`` and ``b``: other args are a binding error."""
    record("S")
    record("E")
    return a + b


# Batch pipelines (issue 42): parts whose results travel along edges, merges that read
# them, and a callback that reads its batch's summary. The checks compare what each read
# with what it should have seen (scripts/chaos/batch_storm.py).

@job(max_attempts=20)
def chaos_part(i: int, ms: int = 0) -> int:
    """A map step: sleeps ``ms`` milliseconds, returns ``i * i``."""
    record("S")
    time.sleep(ms / 1000)
    record("E")
    return i * i


@job(max_attempts=20)
def chaos_merge(parts: dict, failed: list | None = None) -> dict:
    """A merge step: what it read of its dependencies (``current_job().dependencies()``),
    ``seen`` (name -> result of each that completed) and ``failed`` (names of those that
    did not, reached through an ``allow_failure`` edge). Compared with ``parts`` and
    ``failed`` by the checks, not here: a wrong read must show, not retry."""
    record("S")
    deps = current_job().dependencies()
    seen = {d.name or str(d.id): d.result for d in deps if d.ok}
    not_ok = sorted(d.name or str(d.id) for d in deps if not d.ok)
    record("E")
    return {"seen": seen, "failed": not_ok}


@job(max_attempts=20)
def chaos_batch_done(tag: str) -> dict:
    """A batch's callback: its batch's summary as read from inside the callback."""
    record("S")
    s = current_job().batch.summary
    record("E")
    return {"tag": tag, "batch": s.id, "total": s.total, "completed": s.completed,
            "discarded": s.discarded, "cancelled": s.cancelled, "stopped": s.stopped,
            "finished": s.finished}
