"""Handlers for the pool's fault tests (memory cap, leftover processes, a parent that
sleeps). Kinds are prefixed ``pf_`` so they do not clash in the shared registry."""

from __future__ import annotations

import os
import subprocess
import time

from workers import job

_kept: list[bytes] = []


@job(name="pf_grow")
def pf_grow(step_mb: int, max_mb: int, report: str, pause: float = 0.01):
    """Allocate ``step_mb`` at a time up to ``max_mb``, writing how far it got."""
    got = 0
    while got < max_mb:
        _kept.append(b"\x01" * (step_mb << 20))  # written, so resident
        got += step_mb
        with open(report + ".tmp", "w") as f:
            f.write(str(got))
        os.replace(report + ".tmp", report)  # a kill mid-write never leaves it empty
        time.sleep(pause)
    _kept.clear()
    return got


@job(name="pf_spike")
def pf_spike(megabytes: int):
    """Take ``megabytes`` for a moment and give it all back before returning."""
    block = b"\x01" * (megabytes << 20)
    del block
    return os.getpid()


@job(name="pf_pid")
def pf_pid():
    return os.getpid()


@job(name="pf_leave")
def pf_leave(pidfile: str, setsid: bool = False, seconds: float = 0.0, fail: bool = False):
    """Start ``sleep 30`` and leave it running; then sleep, and return or raise."""
    proc = subprocess.Popen(["sleep", "30"], start_new_session=setsid)
    with open(pidfile, "w") as f:
        f.write(str(proc.pid))
    time.sleep(seconds)
    if fail:
        raise RuntimeError("left a process behind")
    return proc.pid


@job(name="pf_orphan")
def pf_orphan(pidfile: str):
    """Leave a grandchild whose parent has exited (a daemon's double fork): it is
    re-parented, not to the handler's process."""
    subprocess.run(["sh", "-c", f"setsid sleep 30 & echo $! > {pidfile}"], check=True)
    return 0


@job(name="pf_sleep")
def pf_sleep(seconds: float):
    time.sleep(seconds)
    return seconds
