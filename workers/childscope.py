"""Processes that belong to the child rather than to one job (issue 45).

The runtime kills every process a job leaves behind (``workers.reaper``): a handler's
stray ``ffmpeg`` or daemonised helper never outlives its job. Some processes are meant
to outlive it: a ``ProcessPoolExecutor`` kept for the child's life, loky's reusable
workers, a helper server. They belong to the child when they are started inside a
*child scope*:

* ``@on_child_start`` hooks run inside one;
* ``with child_scope(): ...`` opens one anywhere (in a hook, a handler, a module);
* ``workers.joblib_config`` / ``workers.loky_executor`` hand the child loky's reusable
  executor (``keep_loky``).

What a scope adopts, and for how long:

* every process started while it is open (in any thread), found by comparing the
  child's descendants as it opens and as it closes, and whatever those processes start
  later;
* the worker processes of every process pool *created* while it is open: a
  ``concurrent.futures.ProcessPoolExecutor``, a loky executor, a
  ``multiprocessing.pool.Pool``. Pools start their workers lazily (at the first task,
  or again after one died or reached ``max_tasks_per_child``), usually during a job,
  so the pool object is adopted, not the pids it had when the scope closed: its
  current workers are asked for at each job's end (the pools' ``_processes`` and
  ``_pool`` attributes). Finding the pools costs one pass over the objects allocated
  since the fork (``gc.get_objects``; the heap the parent froze before forking is not
  walked) as the scope opens and as it closes, and none at all when no pool module is
  imported;
* while the child keeps a pool, the helpers such pools share (multiprocessing's and
  loky's resource trackers, the forkserver) are kept too: they are started once per
  process, whenever the first pool needs them.

A kept process is ended when the child exits (recycled, stopped, drained: the child
SIGKILLs its whole tree on its way out), when the parent kills the child (the signal
goes to the child's process group, which kept processes share unless they left it;
those are SIGKILLed by pid first), and when the supervisor dies (the child's death
signal). Pids are remembered with their start time, so a pid reused by a later job's
process is not mistaken for a kept one.
"""

from __future__ import annotations

import gc
import os
import sys
import weakref
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from shared.procfs import descendants, start_time

# Modules whose pools a scope looks for; none imported, no object is walked.
_POOL_MODULES = ("concurrent.futures.process", "multiprocessing.pool",
                 "joblib.externals.loky.process_executor", "loky.process_executor")
# The loky reusable executor's module, vendored by joblib or installed alone.
_LOKY_REUSABLE = ("joblib.externals.loky.reusable_executor", "loky.reusable_executor")
_LOKY_TRACKERS = ("joblib.externals.loky.backend.resource_tracker",
                  "loky.backend.resource_tracker")


class ChildKeeper:
    """The child's record of what it keeps across jobs: processes (pid and start time)
    and process pools (weakly: a pool the program dropped keeps nothing)."""

    def __init__(self) -> None:
        self._processes: dict[int, int] = {}  # pid -> start time in clock ticks
        self._pools: weakref.WeakSet[Any] = weakref.WeakSet()
        self._loky = False

    def holds(self) -> bool:
        """Whether anything is kept (else a job's end reaps as if no scope existed):
        processes or pools of the child's, or the helpers pools share."""
        return bool(self._processes or self._loky or len(self._pools) or _pool_helpers())

    def retire_job_pools(self) -> int:
        """At a job's end, before its leftovers are reaped: shut down loky's reusable
        executor unless the child keeps it; how many were shut down.

        loky keeps that executor in a module global and hands it to the next
        ``Parallel``. Left to the reap, its workers die by SIGKILL while the executor
        object lives on: the next job reused it and failed with
        ``TerminatedWorkerError``, or hung on a queue lock an idle worker held as it
        was killed, and the tracker it shared printed a traceback for every semaphore
        the dead executor released. Shut down by loky itself, its queues and
        semaphores (and joblib's memmapping folders) are released while the tracker
        still runs, and the next call builds a fresh executor (loky replaces one
        flagged as shut down)."""
        if self._loky:
            return 0
        retired = 0
        for name in _LOKY_REUSABLE:
            executor = getattr(sys.modules.get(name), "_executor", None)
            if executor is None or executor._flags.shutdown:
                continue
            # joblib's executor also removes its memmapping folders in ``terminate``.
            terminate = getattr(executor, "terminate", None)
            if terminate is not None:
                terminate(kill_workers=True)
            else:
                executor.shutdown(wait=True, kill_workers=True)
            retired += 1
        return retired

    def keep_loky(self) -> None:
        """Keep loky's reusable executor (whichever object it is now: loky replaces it
        when its settings change) with its workers and its resource tracker."""
        self._loky = True

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Adopt what starts while the block runs (see the module's docstring)."""
        me = os.getpid()
        before = set(descendants(me))
        pools_before = weakref.WeakSet(_live_pools())
        try:
            yield
        finally:
            # Descendants too: one whose parent exits later (a daemon's double fork) is
            # re-parented to the child, and still kept.
            for pid in descendants(me):
                if pid not in before:
                    started = start_time(pid)
                    if started is not None:
                        self._processes[pid] = started
            for pool in _live_pools():
                if pool not in pools_before:
                    self._pools.add(pool)

    def spare(self, kids: Iterable[int]) -> set[int]:
        """Of ``kids`` (the child's children now), those it keeps. A kept process that
        exited is forgotten, unless it is a zombie its owner has still to reap."""
        kids = set(kids)
        spared: set[int] = set()
        for pid, started in list(self._processes.items()):
            if start_time(pid) != started:
                del self._processes[pid]  # gone, or its pid now another process's
            elif pid in kids:
                spared.add(pid)
        pools = list(self._pools)
        for pool in pools:
            spared.update(pool_workers(pool))
        if self._loky:
            for name in _LOKY_REUSABLE:
                module = sys.modules.get(name)
                executor = getattr(module, "_executor", None)
                if executor is not None:
                    spared.update(pool_workers(executor))
        # The helpers are the child's whatever their pools are: one per process, idle
        # between calls, ending with the child. Killed, the next pool relaunched them
        # and printed that they had died.
        spared.update(_pool_helpers())
        return spared & kids


def pool_workers(pool: Any) -> set[int]:
    """The worker pids a process pool has now: ``_processes`` (``concurrent.futures``
    and loky executors, pid -> process) or ``_pool`` (``multiprocessing.pool.Pool``)."""
    processes = getattr(pool, "_processes", None)
    if isinstance(processes, dict):
        return {pid for pid in list(processes) if isinstance(pid, int)}
    workers = getattr(pool, "_pool", None)
    if isinstance(workers, list):
        return {pid for pid in (getattr(w, "pid", None) for w in list(workers))
                if isinstance(pid, int)}
    return set()


def _pool_types() -> tuple[type, ...]:
    found: list[type] = []
    process = sys.modules.get("concurrent.futures.process")
    if process is not None:
        found.append(process.ProcessPoolExecutor)
    mp_pool = sys.modules.get("multiprocessing.pool")
    if mp_pool is not None:
        found.append(mp_pool.Pool)
    for name in ("joblib.externals.loky.process_executor", "loky.process_executor"):
        loky = sys.modules.get(name)
        if loky is not None:
            found.append(loky.ProcessPoolExecutor)
    return tuple(found)


def _live_pools() -> list[Any]:
    """Every process pool object alive in this process, outside the frozen heap."""
    if not any(name in sys.modules for name in _POOL_MODULES):
        return []
    types = _pool_types()
    return [obj for obj in gc.get_objects() if isinstance(obj, types)]


def _pool_helpers() -> set[int]:
    """The processes pools share, once started: multiprocessing's and loky's resource
    trackers, multiprocessing's forkserver."""
    pids: set[int] = set()
    for name in ("multiprocessing.resource_tracker", *_LOKY_TRACKERS):
        tracker = getattr(sys.modules.get(name), "_resource_tracker", None)
        pid = getattr(tracker, "_pid", None)
        if isinstance(pid, int):
            pids.add(pid)
    forkserver = getattr(sys.modules.get("multiprocessing.forkserver"), "_forkserver", None)
    pid = getattr(forkserver, "_forkserver_pid", None)
    if isinstance(pid, int):
        pids.add(pid)
    return pids


KEEPER = ChildKeeper()  # the child's one record; hooks and handlers are process-wide too


def child_scope() -> AbstractContextManager[None]:
    """A block whose processes, and the workers of the process pools created in it,
    belong to the child: they outlive the job and end with the child.

    ::

        with child_scope():
            pool = ProcessPoolExecutor(max_workers=2)

    ``@on_child_start`` hooks already run in one. Outside a supervisor's child (a test
    calling the handler directly) it does nothing but run the block."""
    return KEEPER.scope()
