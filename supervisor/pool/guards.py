"""The pool's guards at the edges: a memory cap that holds while a job runs, and a
parent that was itself asleep not blaming its children for the silence.

Pure functions over a child's record, the settings and the ``OsCalls`` facade, so the
fakes drive them like the rest of the policy; ``Pool`` decides what follows (a kill
with kind ``memory``, a recycle, re-armed deadlines).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from supervisor.pool.oscalls import OsCalls
from supervisor.pool.process import ChildProcess
from supervisor.pool.settings import PoolSettings
from supervisor.pool.states import BOOTING, BUSY

_MIB = 1 << 20


def nap_threshold(settings: PoolSettings) -> float:
    """How much later than its deadline a tick may run before the parent counts itself
    as having been asleep (SIGSTOP, a VM pause, a frozen process tree)."""
    return min(1.0, settings.heartbeat_timeout / 4)


def rearm_after_nap(children: Iterable[ChildProcess], settings: PoolSettings, now: float,
                    late: float, log: logging.Logger) -> None:
    """The parent did not run for ``late`` seconds past a deadline, so it could not hear
    its children (or, in a frozen tree, they could not beat). Give each busy child a
    fresh heartbeat window and each booting one the lost time again, before anything is
    enforced. Job timeouts stand: they are the job's budget of wall time."""
    log.warning("the supervisor itself did not run for %.1f s (paused?): heartbeat and "
                "boot deadlines re-armed", late)
    timeout = settings.heartbeat_timeout
    for child in children:
        if child.state == BUSY and child.beat_deadline is not None:
            child.beat_deadline = max(child.beat_deadline, now + timeout)
        elif child.state == BOOTING and child.boot_deadline is not None:
            child.boot_deadline = max(child.boot_deadline, now) + late


def over_memory(oscalls: OsCalls, settings: PoolSettings, child: ChildProcess) -> str | None:
    """Sample a busy child's RSS: why it must be killed if it passed the cap, else None
    (a child already gone is its reaping's business)."""
    limit = settings.max_memory_per_child
    rss = oscalls.rss(child.pid) if limit else None
    if rss is None or rss <= limit:
        return None
    return (f"RSS {rss // _MIB} MiB passed the {limit // _MIB} MiB "
            "max_memory_per_child")


def peaked(oscalls: OsCalls, settings: PoolSettings, child: ChildProcess) -> bool:
    """Whether a child's peak RSS (VmHWM) ever passed the cap. A job that freed what it
    took leaves a low RSS but a grown, fragmented heap: recycle it all the same."""
    limit = settings.max_memory_per_child
    peak = oscalls.peak_rss(child.pid) if limit else None
    return peak is not None and peak > limit
