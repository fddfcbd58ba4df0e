"""Reading the process tree from /proc (Linux), for the parent and the child alike."""

from __future__ import annotations

import os


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
