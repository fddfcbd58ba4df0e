"""Handlers for the discard tests of issue 45 (``--app discard_handlers``): one kind per
way a job ends discarded, a mix for the metrics check, and an ``on_discard`` hook that
notes every discard it is told of (``E2E_LOG``): the reason (the last errors entry's
kind), every entry's kind, the attempt's usage and the process the hook ran in."""

import ctypes
import os
import signal
import time

from e2e_handlers import record

from workers import job, on_discard


@on_discard
def noted(job, errors) -> None:
    record("discard", reason=errors[-1]["kind"], kinds=[e["kind"] for e in errors],
           usage=errors[0].get("usage"))


@job(max_attempts=1)
def dis_abort() -> None:
    """os.abort(): the child dies by SIGABRT on its only attempt."""
    record("start")
    os.abort()


@job(max_attempts=1, heartbeat_timeout=3)
def dis_hang() -> None:
    """A native call that holds the GIL and sleeps: no heartbeat, no CPU, so hung."""
    record("start")
    ctypes.PyDLL(None).sleep(120)


@job(max_attempts=1, timeout=1)
def dis_timeout() -> None:
    """Sleeps past its one-second timeout."""
    record("start")
    time.sleep(120)


@job(max_attempts=1)
def dis_grow(megabytes: int = 300) -> None:
    """Grows past the supervisor's --max-memory-per-child and holds it."""
    record("start")
    ballast = bytearray(megabytes << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    time.sleep(120)


@job(max_attempts=5)
def dis_segv() -> None:
    """SIGSEGV every time: poison after two attempts (a crash counts by default)."""
    record("start")
    os.kill(os.getpid(), signal.SIGSEGV)


@job(max_attempts=3, timeout=1)
def dis_slow() -> None:
    """Times out every time: by default a timeout is no crash, so all three attempts
    run and no poison, no breaker."""
    record("start")
    time.sleep(120)


@job(max_attempts=5, timeout=1, counts_as_crash={"crashed", "timeout"})
def dis_slow_counted() -> None:
    """Times out every time, with timeouts counted as crashes: poison after two."""
    record("start")
    time.sleep(120)


@job(max_attempts=2)
def dis_raise() -> None:
    """An ordinary exception on each of its two attempts."""
    record("start")
    raise RuntimeError("plain failure")


@job
def dis_ok() -> None:
    """Completes."""
    record("start")


@job(resources={"gpu": 1})
def res_gpu(seconds: float = 0.5, meet: int = 0) -> None:
    """Holds one GPU: records what CUDA_VISIBLE_DEVICES and ``devices`` say; with
    ``meet``, waits (at most 60 s) until that many GPU jobs have started, so jobs that
    may run together are seen to."""
    from workers import current_job

    record("start", cuda=os.environ.get("CUDA_VISIBLE_DEVICES"),
           devices=current_job().devices)
    if meet:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _gpu_starts() < meet:
            time.sleep(0.05)
        record("met", met=_gpu_starts() >= meet)
    time.sleep(seconds)
    record("end")


def _gpu_starts() -> int:
    path = os.environ.get("E2E_LOG")
    if not path or not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        return sum(1 for line in f if b'"kind":"res_gpu"' in line and b'"event":"start"' in line)


@job
def res_env(name: str) -> str | None:
    """The child's value of environment variable ``name``, as a job sees it."""
    return os.environ.get(name)
