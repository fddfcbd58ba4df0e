"""The handler of ``scripts/bench/loky_warm.py``: one joblib ``Parallel`` call of trivial
tasks on two loky workers, either through ``workers.joblib_config`` (loky's workers kept
by the child) or through plain ``joblib.parallel_config`` (killed after every job, as
before issue 45). It returns how long the call took and the child's pid."""

from __future__ import annotations

import os
import time

from workers import job, joblib_config


def _noop(x: int) -> int:
    return x


@job(queue="loky")
def loky_call(kept: bool, tasks: int = 8) -> dict:
    import joblib

    config = joblib_config(n_jobs=2) if kept else joblib.parallel_config(backend="loky",
                                                                         n_jobs=2)
    started = time.perf_counter()
    with config:
        joblib.Parallel()(joblib.delayed(_noop)(x) for x in range(tasks))
    return {"child": os.getpid(), "seconds": time.perf_counter() - started}
