"""Reading the process tree from /proc (Linux), for the parent and the child alike: who
descends from whom, and how much CPU and memory a process and its descendants use."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import NamedTuple

_ANY_EXITED = os.WEXITED | os.WNOHANG | os.WNOWAIT
_siginfo = ctypes.create_string_buffer(128)  # a siginfo_t, whose contents go unread
_libc_waitid: Callable[..., int] | None
try:
    _libc_waitid = ctypes.CDLL(None, use_errno=True).waitid
except (OSError, AttributeError):  # pragma: no cover - every Linux libc has waitid
    _libc_waitid = None


def has_children() -> bool:
    """Whether this process has a child, live or zombie, reaping none: one
    ``waitid(WNOWAIT | WNOHANG)``, through libc (``os.waitid``'s ECHILD exception costs
    twice the call). In a subreaper, no child means no descendant at all."""
    if _libc_waitid is not None:
        return _libc_waitid(os.P_ALL, 0, _siginfo, _ANY_EXITED) == 0
    try:
        os.waitid(os.P_ALL, 0, _ANY_EXITED)
    except ChildProcessError:
        return False
    return True


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` now (empty if it is gone)."""
    # Every thread's list: a child belongs to the thread that forked it, and an orphan
    # re-parented to a subreaper may land on any of its threads.
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            kids.extend(int(k) for k in _read(f"/proc/{pid}/task/{tid}/children").split())
        except OSError:
            pass
    return kids


def _read(path: str) -> bytes:
    """A whole /proc file. ``os.read`` in 4 KiB pieces: a buffered ``open().read()``
    costs several times more on these files, which report a size of 0."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 4096)
        if len(data) < 4096:
            return data
        parts = [data]
        while data:
            data = os.read(fd, 65536)
            parts.append(data)
        return b"".join(parts)
    finally:
        os.close(fd)


def descendants(pid: int, limit: int = 10_000) -> list[int]:
    """Every live descendant of ``pid`` (zombies included), parents before children; at
    most ``limit`` (a fork bomb must not keep the caller walking)."""
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < limit:
        for kid in children(todo.pop()):
            found.append(kid)
            todo.append(kid)
    return found


class GroupSample(NamedTuple):
    """One look at a process and everything it started: their CPU time so far in seconds
    (user + system, with what their reaped children used; the kernel counts it in clock
    ticks, 10 ms here), and the state letter of the process itself (``R``, ``S``, ``D``,
    ``T``, ...), and the resident set of the process itself in bytes (0: unknown)."""

    cpu_seconds: float
    state: str
    rss_bytes: int = 0


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (the state first), or
    None if it cannot be read."""
    try:
        data = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields follow the last ")".
    end = data.rfind(b")")
    return data[end + 2:].split() if end >= 0 else None


def start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``starttime``, field 22 of
    stat); with the pid it names one process for good, since a pid is reused but never
    with the same start. None if it is gone (a zombie still has one)."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    return int(fields[19])


def group_sample(pid: int) -> GroupSample | None:
    """CPU time of ``pid`` and of its live descendants (``tree_ticks``), and the state
    of ``pid``; None if ``pid``'s own stat cannot be read (gone, or no ``/proc``)."""
    own = _stat_fields(pid)
    if own is None or len(own) < 15:
        return None
    ticks = tree_ticks(pid, include_self=True)
    # rss (field 24 of stat, 22 after the name) in pages.
    rss = int(own[21]) * _PAGE_SIZE if len(own) > 21 else 0
    return GroupSample(ticks / _CLK_TCK, own[0].decode("ascii", "replace"), rss)


def descendants_cpu(pid: int) -> float:
    """CPU seconds used so far by ``pid``'s live descendants (zombies included) and by
    the children they reaped (``tree_ticks``); not ``pid``'s own."""
    return tree_ticks(pid) / _CLK_TCK


def tree_ticks(pid: int, include_self: bool = False, limit: int = 1000,
               tries: int = 4) -> int:
    """Clock ticks of CPU (user + system, with ``cutime``/``cstime``: what each one's
    reaped children used) of ``pid``'s live descendants, and of ``pid`` itself with
    ``include_self``; at most ``limit`` processes.

    The sum is conserved as processes exit: a zombie's stat still holds its times, and
    reaping moves them into its parent's ``cutime``. The walk lists parents before their
    children, so a process reaped mid-walk is either read in its parent's ``cutime`` and
    then found gone, or gone before its parent was read; both show as a listed pid whose
    stat cannot be read, and the walk starts again (up to ``tries`` times; then the
    partial sum, low by what the vanished ones used). A process read and then reaped by
    a parent read later cannot happen in that order, so nothing is counted twice."""
    ticks = 0
    for _ in range(tries):
        pids = descendants(pid, limit)
        if include_self:
            pids.insert(0, pid)
        ticks, whole = _sum_ticks(pids)
        if whole:
            break
    return ticks


def _sum_ticks(pids: list[int]) -> tuple[int, bool]:
    """The ticks of ``pids`` and whether every one's stat could be read."""
    ticks = 0
    whole = True
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is None or len(fields) < 15:
            whole = False
            continue
        # utime, stime, cutime, cstime: fields 14-17 of stat, 11-14 after the name.
        ticks += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return ticks, whole


def rss(pid: int) -> int | None:
    """The resident set of ``pid`` now in bytes (``/proc/<pid>/statm``); None if gone."""
    try:
        return int(_read(f"/proc/{pid}/statm").split()[1]) * _PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return None


def tree_rss(pid: int, limit: int = 1000) -> int | None:
    """The resident sets of ``pid`` and its live descendants (at most ``limit``), summed
    in bytes; None if ``pid`` is gone. Pages they share (a fork's copy-on-write heap)
    count once per process, so the sum errs high."""
    own = rss(pid)
    if own is None:
        return None
    return own + sum(rss(kid) or 0 for kid in descendants(pid, limit))


_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
