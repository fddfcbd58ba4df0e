"""Removing what a child's processes leave in ``/dev/shm`` (issue 47), so nothing a job
created there outlives the processes that used it, and none outlives the child.

Process pools name their shared objects there and rely on a tracker process to remove
them: loky's semaphores (``sem.loky-<pid>-<random>``), joblib's memmapping folders
(``joblib_memmapping_folder_<pid>_...``), ``multiprocessing``'s ``psm_*`` segments and
``sem.mp-*`` semaphores. The runtime SIGKILLs every process a job left (its tracker
too, ``workers.reaper``), so those entries stay; a container's ``/dev/shm`` is 64 MB by
default, and a worker that runs for weeks fills it.

``/dev/shm`` records no creator, so an entry is taken as the child's only when it
appeared after the child started (``ShmJanitor`` lists ``/dev/shm`` at boot) and:

- its name carries, as a token of digits between ``-``, ``_`` or ``.`` (or at the end),
  the pid of the child or of one of the processes about to be killed (the convention of
  loky, joblib, torch and ``multiprocessing.resource_tracker``'s users); or
- one of those processes has it open or mapped (``/proc/<pid>/fd`` and ``maps``), and
  no live process outside the child's tree does.

When a job's leftovers are about to be killed (``before_reap``) the janitor notes the
entries of those processes; after the kill (``after_reap``) it removes them. When the
child exits (``at_exit``) it removes the entries of the child itself. A child the
parent killed or that crashed is cleared by the parent (``remove_for_dead_child``), and
one whose parent died clears its own the same way before it dies. An entry created
before the child started is never removed, nor one only another process's pid names.
What it cannot see: an entry a killed process created and closed, whose name carries no
pid (a tracker's own bookkeeping would have removed it), and entries under a directory
other than ``/dev/shm``.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterable

from shared.procfs import descendants

SHM_DIR = "/dev/shm"
# How long a child waits for a pool's tracker to unlink what the pool's shutdown
# released (``ShmJanitor.settle``), and how often it looks meanwhile.
SETTLE_TIMEOUT = 1.0
SETTLE_POLL = 0.002
# A pid has no leading zero and at most 7 digits (pid_max is at most 4194304).
_PID_TOKEN = re.compile(rb"(?<![0-9A-Za-z])([1-9][0-9]{0,6})(?=[-_.]|$)")
_PREFIX = SHM_DIR + "/"


def listing(directory: str = SHM_DIR) -> set[str]:
    """The names in ``directory`` now (empty if it cannot be read)."""
    try:
        return set(os.listdir(directory))
    except OSError:
        return set()


def pid_tokens(name: str) -> set[int]:
    """The pids a name carries: runs of digits after a start, ``-``, ``_`` or ``.`` and
    before one of those or the end (``sem.loky-812-x1`` carries 812)."""
    return {int(m) for m in _PID_TOKEN.findall(name.encode("utf-8", "surrogateescape"))}


def first_pid(name: str) -> int | None:
    """The first pid token of ``name``: its creator's, by the convention above."""
    found = _PID_TOKEN.search(name.encode("utf-8", "surrogateescape"))
    return int(found.group(1)) if found else None


def referenced(pids: Iterable[int], directory: str = SHM_DIR) -> set[str]:
    """The top-level names under ``directory`` that ``pids`` have open or mapped."""
    prefix = directory.rstrip("/") + "/"
    found: set[str] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            fds = []
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(prefix):
                found.add(_top(target[len(prefix):]))
        try:
            with open(f"/proc/{pid}/maps", "rb") as f:
                data = f.read()
        except OSError:
            continue
        needle = prefix.encode()
        at = data.find(needle)
        while at >= 0:
            end = data.find(b"\n", at)
            path = data[at + len(needle):end if end >= 0 else None]
            found.add(_top(path.decode("utf-8", "surrogateescape")))
            at = data.find(needle, at + 1 if end < 0 else end)
    found.discard("")
    return found


def _top(path: str) -> str:
    # " (deleted)" marks a mapped file already unlinked: nothing left to remove.
    if path.endswith(" (deleted)"):
        return ""
    return path.split("/", 1)[0]


def _live_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _outside_group(pids: Iterable[int], pgid: int) -> list[int]:
    out = []
    for pid in pids:
        try:
            if os.getpgid(pid) != pgid:
                out.append(pid)
        except ProcessLookupError:
            pass
    return out


def remove_for_dead_child(pid: int, directory: str = SHM_DIR) -> int:
    """The child ``pid`` is dead (killed, or crashed) without removing what its pools
    made: remove the entries whose name's first pid is ``pid`` (loky's semaphores and
    joblib's folders name the process that made them), unless a live process outside
    the child's process group (which is being killed) still uses one. How many went."""
    names = {name for name in listing(directory) if first_pid(name) == pid}
    if not names:
        return 0
    names -= referenced(_outside_group(_live_pids(), pid), directory)
    return remove(names, directory)


def remove(names: Iterable[str], directory: str = SHM_DIR) -> int:
    """Remove ``names`` from ``directory`` (files and folders); return how many went."""
    gone = 0
    for name in names:
        path = os.path.join(directory, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            gone += 1
        except OSError:
            pass  # gone already, or not ours to remove after all (another user's)
    return gone


class ShmJanitor:
    """One child's record of ``/dev/shm``: what was there when it started, and what its
    processes have left since."""

    __slots__ = ("_at_boot", "_directory", "_due", "_me", "removed")

    def __init__(self, directory: str = SHM_DIR) -> None:
        self._directory = directory
        self._at_boot = listing(directory)
        self._me = os.getpid()
        self._due: set[str] = set()  # noted before a kill, removed after it
        self.removed = 0  # entries removed over the child's life

    def _claim(self, named: set[int], using: set[int], tree: set[int]) -> set[str]:
        """The entries that appeared since boot and that a pid in ``named`` names, or a
        pid in ``using`` uses while no live process outside ``tree`` does."""
        new = listing(self._directory) - self._at_boot
        if not new:
            return set()
        mine = {name for name in new if pid_tokens(name) & named}
        if not using or mine == new:
            return mine  # nothing else to look for: no /proc/<pid>/maps read
        used = (referenced(using, self._directory) & new) - mine
        if used:
            others = [pid for pid in _live_pids() if pid not in tree]
            used -= referenced(others, self._directory)
        return mine | used

    def before_reap(self, tree: list[int], keeping: bool = False) -> None:
        """A job's leftovers ``tree`` (the child's descendants) are about to be killed:
        note the entries they name or use, and those named for the child (the pools it
        ran them for: loky's semaphores, joblib's folders). What the child alone uses
        waits for ``at_exit``. ``keeping``: the child keeps processes of its own
        (``workers.childscope``), whose pools' entries are named for the child too and
        still in use: only what the leftovers name, or they alone use, goes."""
        pids = set(tree)
        if not pids:
            return
        if keeping:
            self._due |= self._claim(pids, pids, pids)
        else:
            self._due |= self._claim(pids | {self._me}, pids, pids | {self._me})

    def after_reap(self) -> int:
        """The leftovers are gone: remove what ``before_reap`` noted; how many went."""
        due, self._due = self._due, set()
        gone = remove(due, self._directory)
        self.removed += gone
        return gone

    def settle(self, timeout: float = SETTLE_TIMEOUT, *,
               sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> bool:
        """A job's process pool was just shut down by its own library (loky's executor,
        ``workers.childscope``): wait, at most ``timeout`` seconds, until the entries
        named for the child that appeared since it started and that it no longer has
        open or mapped are gone. The library's resource tracker, a process of its own,
        unlinks those semaphores once told, a few ms later, and later still on a busy
        machine: without the wait the next job in this child could find them. Removing
        them here instead would race the tracker, which prints a traceback for each one
        it finds gone. True if none was left."""
        deadline = clock() + timeout
        while True:
            new = listing(self._directory) - self._at_boot
            pending = {name for name in new if self._me in pid_tokens(name)}
            if pending:  # what the child or a process under it still uses is not due
                users = {self._me, *descendants(self._me)}
                pending -= referenced(users, self._directory)
            if not pending:
                return True
            if clock() >= deadline:
                return False
            sleep(SETTLE_POLL)

    def at_exit(self) -> int:
        """The child is about to exit, its tree already reaped: remove every entry it
        made or uses that appeared since it started; how many went."""
        me = {self._me}
        gone = remove(self._claim(me, me, me) | self._due, self._directory)
        self._due = set()
        self.removed += gone
        return gone
