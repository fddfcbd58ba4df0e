"""Handlers for the pool's real-process tests. Kinds are prefixed ``pool_`` so they do
not clash with other tests' kinds in the shared registry."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time

from gil_busy import hold_gil_burning_cpu

from workers import Discard, Retry, current_job, job

_hoard: list[bytes] = []


@job(name="pool_noop")
def pool_noop() -> None:
    return None


@job(name="pool_echo")
def pool_echo(value, pid: bool = False):
    if pid:
        return {"value": value, "pid": os.getpid()}
    return value


@job(name="pool_raise")
def pool_raise(message: str = "boom"):
    def inner():
        raise ValueError(message)
    inner()


@job(name="pool_discard")
def pool_discard():
    raise Discard("not worth it")


@job(name="pool_retry")
def pool_retry(delay: float = 7.5):
    raise Retry(delay=delay, reason="later please")


@job(name="pool_segv")
def pool_segv():
    os.kill(os.getpid(), signal.SIGSEGV)


@job(name="pool_exit")
def pool_exit(code: int = 3):
    os._exit(code)


@job(name="pool_sleep")
def pool_sleep(seconds: float):
    time.sleep(seconds)
    return seconds


@job(name="pool_sleep_with_timeout", timeout=0.3)
def pool_sleep_with_timeout(seconds: float):
    time.sleep(seconds)


@job(name="pool_regex_busy")
def pool_regex_busy(seconds: float = 2.0):
    # One C call that holds the GIL and burns CPU the whole time: busy, not hung.
    return hold_gil_burning_cpu(seconds)


@job(name="pool_gil_sleep")
def pool_gil_sleep(seconds: int = 60):
    # A native call that holds the GIL and uses no CPU: functions of a ``PyDLL`` keep
    # the GIL, so the heartbeat thread starves and the CPU time stands still: hung.
    ctypes.PyDLL(None).sleep(seconds)


@job(name="pool_short_beat", heartbeat_timeout=0.5)
def pool_short_beat(seconds: int = 60):
    # Its kind's heartbeat timeout (0.5 s) is shorter than the pool's.
    ctypes.PyDLL(None).sleep(seconds)


@job(name="pool_stop_self")
def pool_stop_self():
    os.kill(os.getpid(), signal.SIGSTOP)


@job(name="pool_grandchild")
def pool_grandchild(pidfile: str, seconds: float = 60.0):
    proc = subprocess.Popen(["sleep", str(seconds)])
    with open(pidfile, "w") as f:
        f.write(str(proc.pid))
    time.sleep(seconds)


@job(name="pool_hoard")
def pool_hoard(megabytes: int):
    # Bytes written, not calloc'ed, so the pages are resident.
    _hoard.append(b"\x01" * (megabytes << 20))
    return {"pid": os.getpid()}


@job(name="pool_unserializable")
def pool_unserializable():
    return {1, 2, 3}


@job(name="pool_big_result")
def pool_big_result(size: int):
    return "x" * size


@job(name="pool_progress")
def pool_progress(steps: int = 3, pause: float = 0.1):
    for i in range(1, steps + 1):
        current_job().progress(i, steps, message=f"step {i}")
        time.sleep(pause)
    return steps


@job(name="pool_pid")
def pool_pid():
    return os.getpid()


@job(name="pool_fds")
def pool_fds():
    return sorted(int(fd) for fd in os.listdir("/proc/self/fd"))


@job(name="pool_fork_and_return")
def pool_fork_and_return(seconds: float = 0.3, copy_seconds: float = 0.0):
    # The copy returns into the child runtime as if it were the handler itself.
    if os.fork() == 0:
        time.sleep(copy_seconds)
        return {"by": "copy", "pid": os.getpid()}
    time.sleep(seconds)
    return {"by": "original", "pid": os.getpid()}


def _pipe_fds(mode: int) -> list[int]:
    """This process's pipe fds above stdio opened for reading (0) or writing (1)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            with open(f"/proc/self/fdinfo/{fd}") as f:
                flags = next(int(line.split()[1], 8) for line in f if line.startswith("flags"))
        except (OSError, StopIteration):
            continue
        if fd > 2 and target.startswith("pipe:") and flags & 3 == mode:
            found.append(fd)
    return found


@job(name="pool_close_fds")
def pool_close_fds(which: str = "low"):
    if which == "low":
        os.closerange(0, 11)
    elif which == "read":  # the job pipe the RUN frames come on
        for fd in _pipe_fds(0):
            os.close(fd)
    elif which == "write-replaced":  # the answer pipe, its number reused by a file
        for fd in _pipe_fds(1):
            os.close(fd)
            taken = os.open(os.devnull, os.O_WRONLY)
            if taken != fd:
                os.dup2(taken, fd)
                os.close(taken)
    return which


@job(name="pool_bad_progress")
def pool_bad_progress(catch: bool = True):
    from decimal import Decimal

    if not catch:
        current_job().progress(Decimal("1.5"))
    try:
        current_job().progress(Decimal("1.5"), 3)
    except TypeError as exc:
        return f"refused: {exc}"
    return "accepted"


def _note(path: str, what: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{what}\n".encode())
    finally:
        os.close(fd)


@job(name="pool_note")
def pool_note(path: str):
    """Writes ``ran <id>`` to ``path``: proof that the job ran."""
    _note(path, f"ran {current_job().id}")
    return current_job().id


@job(name="pool_hold")
def pool_hold(path: str, release: str, timeout: float = 20.0):
    """Writes ``ran <id>`` to ``path``, then runs until ``release`` exists: a test
    holds a job running without sleeping itself."""
    _note(path, f"ran {current_job().id}")
    deadline = time.monotonic() + timeout
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.005)
    return "released"
