"""Handlers for ``tests/test_operator_truth_*.py``: a job that checkpoints and ends at
once (its checkpoint races its completion), and one that reports partial progress, then
waits for a file before it returns."""

from __future__ import annotations

import os
import time

from workers import current_job, job


@job
def ot_checkpoint_and_end(n: int = 0) -> int:
    current_job().checkpoint({"n": n})
    return n


@job
def ot_partial_progress(gate: str) -> str:
    current_job().progress(0.05, 5.0, message="started")
    deadline = time.monotonic() + 60
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    return "done"
