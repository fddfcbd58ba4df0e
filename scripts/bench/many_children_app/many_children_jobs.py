"""The many-children benchmark's sleeping job (``scripts/bench/many_children.py``), in a
folder of its own so that any checkout's ``supervisor run`` can load it beside its own
handlers (a before/after comparison runs the old checkout with this same job)."""

from __future__ import annotations

import os
import time

from workers import job


def tree_cpu_ns() -> int:
    """CPU time so far of the parent and of every child it has now (``schedstat``: time
    on a CPU, exact), in ns: what the supervisor's start-up cost in all, read at the
    first job's start."""
    parent = os.getppid()
    total = 0
    with open(f"/proc/{parent}/task/{parent}/children") as f:
        pids = [parent, *map(int, f.read().split())]
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # exited meanwhile
    return total


@job(queue="bench_sleep")
def sleep_timed(seconds: float, probe: bool = False) -> list:
    """Sleeps ``seconds``; returns [pid, start, end] (epoch seconds), and with ``probe``
    the supervisor's tree's CPU at the start (``tree_cpu_ns``): the child is occupied
    without using a CPU, which leaves the CPUs to the parent and PostgreSQL as a
    many-core machine would."""
    started = time.time()
    cpu = tree_cpu_ns() if probe else None
    time.sleep(seconds)
    return [os.getpid(), started, time.time(), cpu]
