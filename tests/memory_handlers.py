"""Handlers that really hold memory (every page written), for the container-memory
tests (issue 51) and the process-tree tests (issue 45). Kinds are prefixed ``mem_``."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from workers import job

STEP_MB = 25  # grown in steps, so the parent's samples see it on its way


def _hold(megabytes: int, seconds: float, pause: float) -> int:
    kept = []
    got = 0
    while got < megabytes:
        step = min(STEP_MB, megabytes - got)
        kept.append(b"\x01" * (step << 20))  # written, so resident
        got += step
        time.sleep(pause)
    time.sleep(seconds)
    return got


@job(name="mem_hold")
def mem_hold(megabytes: int, seconds: float = 3.0, pause: float = 0.02) -> int:
    """Take ``megabytes`` (every page touched), hold it ``seconds``, give it back."""
    return _hold(megabytes, seconds, pause)


@job(name="mem_grow")
def mem_grow(pause: float = 0.25) -> int:
    """Grow by ``STEP_MB`` every ``pause`` seconds, without bound."""
    return _hold(1 << 30, 0, pause)


@job(name="mem_tree")
def mem_tree(megabytes: int, seconds: float = 3.0) -> int:
    """Run a subprocess (an ffmpeg's stand-in) that takes ``megabytes`` and holds it
    ``seconds``; the handler itself holds nothing."""
    here = str(Path(__file__).resolve().parent)
    code = (f"import sys; sys.path.insert(0, {here!r}); "
            f"import memory_handlers as m; m._hold({megabytes}, {seconds}, 0.02)")
    subprocess.run([sys.executable, "-c", code], check=True)
    return megabytes
