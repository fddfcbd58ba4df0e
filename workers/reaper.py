"""A child's hold on every process its handlers start, so none outlives its job
(except what belongs to the child itself: ``workers.childscope``).

Two moments matter, and each has its mechanism:

* **The job's end.** The child is a *subreaper* (``PR_SET_CHILD_SUBREAPER``): a
  process its handler started stays its descendant even after it calls ``setsid`` or
  its own parent exits (orphans re-parent to the child, not to init). After every job
  ``reap_leftovers`` walks that tree (``/proc/<pid>/task/*/children``), SIGKILLs it and
  waits for every one, before the answer goes to the parent.
* **The supervisor's death.** The kernel signals the child when the parent dies
  (``PR_SET_PDEATHSIG``). That signal is ``DEATH_SIGNAL``, not SIGKILL, so the child
  can first SIGKILL its tree (a process group signal misses ``setsid`` escapees, and a
  SIGKILLed child leaves its tree to init), then its own group, itself included. Its
  default action terminates, so a child that dies before ``arm`` still dies; a handler
  that holds the GIL in C code delays the cleanup until it lets go.

A job the parent kills (timeout, hung, memory, cancel) is covered by the parent: it
SIGKILLs the escapees it finds under the child before signalling the group.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

from shared.exitcodes import CHILD_PARENT_GONE
from shared.procfs import children, descendants, has_children
from workers.shm import remove_for_dead_child

PR_SET_CHILD_SUBREAPER = 36
DEATH_SIGNAL = signal.SIGRTMIN + 3  # unused by Python and by common libraries
_MAX_ROUNDS = 64  # a fork bomb racing the reaper gives up before the child does

try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - every Linux libc has prctl
    _libc = None


def arm() -> None:
    """Make this process a subreaper and install the parent-death cleanup. Call after
    the signal dispositions are reset, with ``DEATH_SIGNAL`` as the death signal."""
    if _libc is not None and _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    signal.signal(DEATH_SIGNAL, _parent_died)


def reap_leftovers(before_kill: Callable[[list[int]], None] | None = None,
                   spare: Callable[[list[int]], set[int]] | None = None) -> int:
    """SIGKILL and reap every process left under this one; return how many there
    were. When there are none (nearly every job) it costs one ``waitid`` call.
    ``before_kill`` sees the tree first, while it still runs (``workers.shm``).

    ``spare``, given this process's children, names those that belong to the child
    rather than to the job (``workers.childscope``): they and everything under them are
    left running, and only the other children are waited for (a kept pool reaps its own
    workers)."""
    if spare is None:
        if not _anychildren():
            return 0
    elif not has_children():
        return 0
    me = os.getpid()
    total = 0
    spared: set[int] = set()
    for round_no in range(_MAX_ROUNDS):
        if spare is None:
            tree = descendants(me)
            roots = None
        else:
            kids = children(me)
            if round_no == 0:
                spared = spare(kids)
            roots = [pid for pid in kids if pid not in spared]
            tree = [p for root in roots for p in (root, *descendants(root))]
        if not tree:
            break
        if before_kill is not None:
            before_kill(tree)
            before_kill = None
        total += len(tree)
        for pid in tree:
            _kill(pid)
        # Direct children only are ours to wait for; their killed descendants become
        # our zombies as they are re-parented, and the next round reaps them.
        for pid in children(me) if roots is None else roots:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    return total


def _anychildren() -> bool:
    # A subreaper with no child of its own has no descendant at all: every one hangs
    # from a child, live or zombie. No child is the common answer, in one system call
    # that raises nothing (waitpid's ECHILD exception costs more than the call).
    if not has_children():
        return False
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True  # one still runs


def _parent_died(signum: int, frame: object) -> None:
    me = os.getpid()
    for pid in descendants(me):
        _kill(pid)
    try:
        # No parent is left to clear what this child's pools named for it.
        remove_for_dead_child(me)
    except Exception:
        pass
    try:
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(CHILD_PARENT_GONE)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


