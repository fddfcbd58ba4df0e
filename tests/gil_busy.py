"""A native call that holds the GIL and burns CPU for about a given time, for tests of
busy-versus-hung liveness on any machine."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable

_BACKTRACKING = re.compile(r"(a+)+$")


def hold_gil_burning_cpu(seconds: float) -> bool:
    """One ``re.match`` of catastrophic backtracking lasting about ``seconds``."""
    return gil_holding_call(seconds)()


def gil_holding_call(seconds: float) -> Callable[[], bool]:
    """Calibrate now (in Python, with bytecode boundaries), and return the native call of
    about ``seconds`` that holds the GIL throughout, for a test that must know when the
    handler is inside it.

    The length is calibrated on the spot, because the time doubles with each character
    and a fixed length took 5.4 s on one machine and under 3 s on another."""
    probe, took = 16, 0.0
    while took < 0.05:
        probe += 1
        took = _fastest_match(probe)
    subject = "a" * (probe + max(0, math.ceil(math.log2(seconds / took)))) + "!"
    return lambda: bool(_BACKTRACKING.match(subject))


def _fastest_match(length: int, tries: int = 3) -> float:
    # The fastest of a few: a probe that lost the CPU to another process would make the
    # machine look slower than it is, and the real call too short.
    fastest = float("inf")
    for _ in range(tries):
        started = time.perf_counter()
        _BACKTRACKING.match("a" * length + "!")
        fastest = min(fastest, time.perf_counter() - started)
    return fastest
