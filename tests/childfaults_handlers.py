"""Handlers for the child-side policy tests (issue 11: error messages, results, soft
timeout, snooze; issue 19: a handler's output). Kinds are prefixed ``cf_``."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from workers import Snooze, SoftTimeout, current_job, job


@job(name="cf_raise_noted")
def cf_raise_noted():
    exc = ValueError("disk is full\nsecond line of the message")
    exc.add_note("hint: free some space")
    raise exc


@job(name="cf_raise_empty")
def cf_raise_empty():
    raise KeyError


@dataclass
class Point:
    x: float
    y: float


@job(name="cf_result")
def cf_result(which: str):
    return {
        "nan": {"ok": 1, "values": [1.0, math.nan]},
        "inf": -math.inf,
        "dataclass": [Point(1.0, math.inf)],
        "fine": {"v": [1.5, None, "null"]},
    }[which]


@job(name="cf_soft", soft_timeout=0.3)
def cf_soft(seconds: float, busy: bool = False):
    """Sleeps (or spins) past its soft timeout; says whether it got to clean up."""
    started = time.monotonic()
    try:
        if busy:
            while time.monotonic() - started < seconds:
                pass
        else:
            time.sleep(seconds)
    except SoftTimeout as exc:
        return {"cleaned_up": True, "after": round(time.monotonic() - started, 2),
                "message": str(exc)}
    return {"cleaned_up": False}


@job(name="cf_soft_uncaught", soft_timeout=0.2)
def cf_soft_uncaught():
    time.sleep(5)


@job(name="cf_soft_quick", soft_timeout=0.05)
def cf_soft_quick():
    return "quick"


@job(name="cf_default_soft")
def cf_default_soft(seconds: float = 5):
    try:
        time.sleep(seconds)
    except SoftTimeout:
        return "soft"
    return "slept"


@job(name="cf_sleep")
def cf_sleep(seconds: float):
    time.sleep(seconds)
    return seconds


@job(name="cf_snooze")
def cf_snooze(delay: float = 30.0, marker: str | None = None):
    """Snoozes, once per ``marker`` file when one is given (a snooze spends no attempt,
    so the attempt number cannot tell a first run from a later one)."""
    if marker is None or not os.path.exists(marker):
        if marker is not None:
            open(marker, "w").close()
        raise Snooze(delay)
    return {"attempt": current_job().attempt}


@job(name="cf_print")
def cf_print(tag: str):
    print(f"printed {tag}")
    print(f"to stderr {tag}", file=sys.stderr)
    print("partial line without newline", end="")
    os.write(1, f"raw fd write {tag}\n".encode())
    subprocess.run(["sh", "-c", f"echo from a subprocess {tag}; echo sub err {tag} >&2"],
                   check=True)
    print("\x1b[31mred\x1b[0m and {\"not\": json", file=sys.stderr)
    return tag


@job(name="cf_replace_answer_pipe")
def cf_replace_answer_pipe():
    """Closes the child's answer pipe and puts a file on its number: the runtime must
    say so (on the supervisor's stream, in its format) and leave."""
    import pool_handlers

    return pool_handlers.pool_close_fds.func("write-replaced")
