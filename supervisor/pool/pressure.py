"""The container's memory as the pool's last guard (issue 51): the supervisor stops a
job itself before the kernel's OOM killer picks one.

While jobs run in a container with a memory limit, the pool reads the container's usage
(``OsCalls.memory_usage``: its working set, without the inactive page cache) at most
every ``CHECK_INTERVAL``, piggybacked on the busy children's memory samples. Past the
limit less its headroom (``shared.memlimit.headroom``, what admission keeps free) the
youngest running job is sent the stop notice; within half the headroom of the limit it
is killed at once (the youngest again: the one told, unless a younger one started
since). A job told to stop by its per-child cap is killed at once as soon as the
container is past the notice line: its grace would only give the kernel the time to
kill some other job first. One job at a
time: while a child killed for memory has not been reaped, its memory is on its way
back and nothing more is killed.

The youngest job is the one that started last: the one whose start the container's
state depended on least, and the least work lost. The limit is read once, at start.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.memlimit import headroom
from shared.units import format_size

CHECK_INTERVAL = 0.05  # seconds between two reads of the container's usage while busy



class Pressure(StrEnum):
    """How close the container's memory is to its limit (``ContainerGuard.level``)."""

    NOTICE = "notice"  # past the limit less its headroom: the youngest job is told to stop
    KILL = "kill"  # within half the headroom of the limit: the youngest job is killed now


NOTICE = Pressure.NOTICE
KILL = Pressure.KILL


@dataclass
class ContainerGuard:
    """The container's ``limit`` and when its usage is read next (``due``)."""

    limit: int
    due: float = 0.0

    @property
    def notice_line(self) -> int:
        """Usage past which the youngest job is told to stop."""
        return self.limit - headroom(self.limit)

    @property
    def kill_line(self) -> int:
        """Usage past which the youngest job is killed at once."""
        return self.limit - headroom(self.limit) // 2

    def level(self, usage: int | None) -> Pressure | None:
        """``KILL``, ``NOTICE`` or None (fine, or the usage cannot be read)."""
        if usage is None or usage < self.notice_line:
            return None
        return KILL if usage >= self.kill_line else NOTICE

    def describe(self, usage: int) -> str:
        """The container's state in words, for the job's errors entry."""
        return (f"the container's memory at {format_size(usage)} of its "
                f"{format_size(self.limit)} limit")
