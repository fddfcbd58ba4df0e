"""How many children this machine can hold, checked before ``run`` forks any.

``-n 10000`` used to start forking with no limit: the loop then spends its time in
``fork`` and the OOM killer or the process table ends it. Two ceilings:

* ``CHILDREN_PER_CPU`` (64) children per CPU. Children are processes that each run one
  job; beyond a few per CPU only jobs that mostly wait (network, subprocesses) gain, and
  64 per CPU is already far past where the parent's loop and the scheduler pay more than
  they get. I/O-bound work that needs more concurrency belongs in threads or async code
  inside a handler, not in thousands of processes.
* ``RLIMIT_NPROC`` (``ulimit -u``) for a non-root user: the processes this user already
  runs count against it too, so the children must fit in what is left of it.
"""

from __future__ import annotations

import os
import resource

CHILDREN_PER_CPU = 64


def _user_processes(uid: int) -> int:
    """How many processes (threads count too, as for the kernel) ``uid`` runs now."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as status:
                fields = dict(line.split(b":", 1) for line in status if b":" in line)
        except OSError:
            continue  # gone meanwhile
        if int(fields.get(b"Uid", b"-1").split()[0]) == uid:
            count += int(fields.get(b"Threads", b"1").strip() or 1)
    return count


def children_problem(children: int, *, cpus: int | None = None) -> str | None:
    """Why ``children`` is more than this machine can hold, in one line naming the
    limit; None when it fits."""
    cpus = cpus or os.cpu_count() or 1
    ceiling = CHILDREN_PER_CPU * cpus
    if children > ceiling:
        return (f"{children} children is more than this machine can hold: the ceiling is "
                f"{CHILDREN_PER_CPU} per CPU, {ceiling} for {cpus} CPU"
                f"{'s' if cpus != 1 else ''}; use -n {ceiling} or fewer")
    soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
    uid = os.getuid()
    if soft != resource.RLIM_INFINITY and uid != 0:  # the kernel does not hold root to it
        left = soft - _user_processes(uid)
        if children > left:
            return (f"{children} children do not fit in RLIMIT_NPROC (ulimit -u {soft}): "
                    f"this user already runs {soft - left} processes, {max(left, 0)} more "
                    "can start")
    return None
