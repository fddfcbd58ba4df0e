"""A native call that holds the GIL and burns CPU for about a given time, for tests of
busy-versus-hung liveness on any machine."""

from __future__ import annotations

import math
import re
import time

_BACKTRACKING = re.compile(r"(a+)+$")


def hold_gil_burning_cpu(seconds: float) -> bool:
    """One ``re.match`` of catastrophic backtracking lasting about ``seconds``.

    The length is calibrated on the spot, because the time doubles with each character
    and a fixed length took 5.4 s on one machine and under 3 s on another."""
    probe, took = 16, 0.0
    while took < 0.05:
        probe += 1
        started = time.perf_counter()
        _BACKTRACKING.match("a" * probe + "!")
        took = time.perf_counter() - started
    n = probe + max(0, math.ceil(math.log2(seconds / took)))
    return bool(_BACKTRACKING.match("a" * n + "!"))
