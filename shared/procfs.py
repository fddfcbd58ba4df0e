"""Reading the process tree from /proc (Linux), for the parent and the child alike: who
descends from whom, and how much CPU a process and its descendants have used."""

from __future__ import annotations

import os
from typing import NamedTuple


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
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                kids.extend(int(k) for k in f.read().split())
        except OSError:
            pass
    return kids


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
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields follow the last ")".
    end = data.rfind(b")")
    return data[end + 2:].split() if end >= 0 else None


def group_sample(pid: int) -> GroupSample | None:
    """CPU time of ``pid`` and of its live descendants, and the state of ``pid``; None
    if ``pid``'s own stat cannot be read (gone, or no ``/proc``)."""
    own = _stat_fields(pid)
    if own is None or len(own) < 15:
        return None
    ticks = 0
    for fields in [own, *(_stat_fields(kid) for kid in descendants(pid, 1000))]:
        if fields is not None and len(fields) >= 15:
            # utime, stime, cutime, cstime: fields 14-17 of stat, 11-14 after the name.
            ticks += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    # rss (field 24 of stat, 22 after the name) in pages.
    rss = int(own[21]) * _PAGE_SIZE if len(own) > 21 else 0
    return GroupSample(ticks / _CLK_TCK, own[0].decode("ascii", "replace"), rss)


_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
