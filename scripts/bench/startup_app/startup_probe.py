"""The start-up benchmark's one handler (``scripts/bench/startup.py``), in a folder of its
own so that any checkout's ``supervisor run`` can load it beside its own handlers."""

from __future__ import annotations

import os
import time

from workers import job


@job(queue="bench_startup")
def startup_probe() -> dict:
    """When the first job began (wall clock) and the parent's CPU until then, in ns
    (``/proc/<parent>/schedstat``: time on a CPU, exact, unlike the 10 ms ticks of
    ``stat``)."""
    at = time.time()
    with open(f"/proc/{os.getppid()}/schedstat") as f:
        parent_ns = int(f.read().split()[0])
    return {"at": at, "parent_cpu_ns": parent_ns}
