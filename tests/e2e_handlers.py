"""Handlers for the end-to-end tests, loaded with ``--app e2e_handlers``.

Each run appends one line to the file named by ``E2E_LOG`` (``O_APPEND`` writes of a
short line are atomic), so tests check what ran, how often and when, instead of
trusting the supervisor's own account.
"""

import ctypes
import os
import time

import orjson
from gil_busy import hold_gil_burning_cpu

from shared.jobs import Backoff
from workers import Discard, current_job, job


def record(event: str, **extra) -> None:
    path = os.environ.get("E2E_LOG")
    if not path:
        return
    ctx = current_job()
    line = orjson.dumps({"id": ctx.id, "attempt": ctx.attempt, "kind": ctx.kind,
                         "queue": ctx.queue, "pid": os.getpid(), "event": event,
                         "t": time.time(), **extra}) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@job
def e2e_noop(n: int = 0) -> int:
    record("run")
    return n


@job
def e2e_sleep(seconds: float) -> str:
    record("start")
    time.sleep(seconds)
    record("end")
    return "slept"


@job(queue="weighted_a")
def e2e_work_a(seconds: float) -> None:
    record("start")
    time.sleep(seconds)
    record("end")


@job(queue="weighted_b")
def e2e_work_b(seconds: float) -> None:
    record("start")
    time.sleep(seconds)
    record("end")


@job(max_attempts=2)
def e2e_raise(message: str = "boom") -> None:
    record("run")
    raise ValueError(message)


@job
def e2e_discard() -> None:
    record("run")
    raise Discard("not worth retrying")


@job(max_attempts=3)
def e2e_segv_once() -> str:
    """Dies by SIGSEGV on its first attempt, succeeds on the next."""
    record("run")
    if current_job().attempt == 1:
        os.kill(os.getpid(), 11)
    return "survived"


@job(max_attempts=3)
def e2e_exit_once(code: int = 3) -> str:
    record("run")
    if current_job().attempt == 1:
        os._exit(code)
    return "survived"


@job(max_attempts=2, timeout=1.0)
def e2e_too_slow() -> None:
    record("run")
    time.sleep(60)


@job(max_attempts=2, timeout=1.0, counts_as_crash={"crashed", "hung", "timeout"})
def e2e_too_slow_counted() -> None:
    """Times out, in a kind whose timeouts count as crashes: poison after two (issue 45:
    by default a timeout is an ordinary failed attempt)."""
    record("run")
    time.sleep(60)


@job(max_attempts=2)
def e2e_hang_in_c() -> None:
    """Stuck in C holding the GIL (libc ``sleep`` through ``PyDLL``, which keeps it):
    no heartbeat can be sent and no CPU time moves."""
    record("run")
    ctypes.PyDLL(None).sleep(600)


@job(max_attempts=1)
def e2e_regex_busy(seconds: float = 6.0) -> bool:
    """Catastrophic backtracking: holds the GIL in C for about ``seconds`` while burning
    CPU: busy, not hung."""
    record("run")
    return hold_gil_burning_cpu(seconds)


@job
def e2e_typed(a: int, b: int) -> int:
    record("run")
    return a + b


@job
def e2e_unserializable() -> object:
    record("run")
    return {1, 2, 3}


@job
def e2e_huge_result(size: int) -> str:
    record("run")
    return "x" * size


@job
def e2e_wait_for(path: str, timeout: float = 30.0) -> str:
    """Runs until ``path`` exists: lets a test hold a job running without sleeping."""
    record("start")
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    record("end")
    return "released"


@job
def e2e_nul_result() -> str:
    record("run")
    return "a\x00b"


@job(max_attempts=3)
def e2e_retry_once(delay: float) -> str:
    record("run")
    if current_job().attempt == 1:
        from workers import Retry

        raise Retry(delay=delay)
    return "second time"


@job(max_attempts=3, backoff=Backoff(base=0.2, factor=1.0, jitter=0.0))
def e2e_quick_backoff() -> None:
    record("run")
    raise ValueError("again")
