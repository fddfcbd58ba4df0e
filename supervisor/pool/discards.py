"""The discard notices the pool hands to children (issue 45): a job the parent
discarded after its own child was gone still has its ``on_discard`` hooks to run, and
only a child can run handler code.

``DiscardNotices`` picks the child that will run them (``runner``: an idle one, else a
busy one that is not leaving, which runs them after its current job) and keeps those
no child could take yet, to hand to the next child that is ready (``at_ready``).
"""

from __future__ import annotations

from collections.abc import Iterable

from shared import wire
from supervisor.pool.process import BUSY, IDLE, ChildProcess


class DiscardNotices:
    """The notices waiting for a child, in the order they were told."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: list[wire.Discarded] = []

    def tell(self, told: wire.Discarded, idle: Iterable[ChildProcess],
             children: Iterable[ChildProcess]) -> None:
        """Send ``told`` to a child that will read its pipe again before it exits (the
        first ``idle`` one, else a busy one of ``children`` that is not leaving), or
        keep it for the next child to be ready."""
        child = runner(idle, children)
        if child is None:
            self._waiting.append(told)
        else:
            child.send(told.encode())

    def at_ready(self, child: ChildProcess) -> None:
        """``child`` just became idle: it takes every notice kept so far, in one write."""
        if self._waiting:
            notices, self._waiting = self._waiting, []
            child.send(b"".join(told.encode() for told in notices))


def runner(idle: Iterable[ChildProcess],
           children: Iterable[ChildProcess]) -> ChildProcess | None:
    """A child that will read its pipe again before it exits, or None."""
    for child in idle:
        if child.state == IDLE:
            return child
    for child in children:
        if child.state == BUSY and not child.retire_after_job and not child.stop_sent:
            return child
    return None
