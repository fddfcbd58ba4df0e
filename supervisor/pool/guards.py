"""The pool's guards at the edges: a memory cap that holds while a job runs, and a
parent that was itself asleep not blaming its children for the silence.

The cap while a job runs (issue 28): a running job past it is first sent the stop notice
and killed ``kill_grace`` later unless it ended first; a child ``MEMORY_HARD_FACTOR``
times over its limit (``hard_over_memory``), or one whose job has not started, is
killed at once, since a grace would only let it grow further.

Pure functions over the settings, the ``OsCalls`` facade and a child's pid, so the fakes
drive them like the rest of the policy; ``Pool`` decides what follows (a kill with kind
``memory``, a recycle, re-armed deadlines). The third guard, against processes that
left a child's group, is part of signalling the child (``ChildProcess.kill``).
"""

from __future__ import annotations

from shared.units import format_size
from supervisor.pool.oscalls import OsCalls
from supervisor.pool.settings import PoolSettings


def nap_threshold(settings: PoolSettings) -> float:
    """How much later than its deadline a tick may run before the parent counts itself
    as having been asleep (SIGSTOP, a VM pause, a frozen process tree)."""
    return min(1.0, settings.heartbeat_timeout / 4)


def _limit(settings: PoolSettings, reserved: int | None) -> int | None:
    """The most a busy child may use: the cap, or its job's larger reservation (None:
    no cap, so no limit)."""
    cap = settings.max_memory_per_child
    return None if cap is None else max(cap, reserved or 0)


def over_memory(settings: PoolSettings, rss: int | None,
                reserved: int | None = None) -> str | None:
    """A busy child's sampled RSS (None: it is gone, its reaping's business): why it
    must be killed if it passed the cap, else None. A job that reserved more memory
    than the cap (``reserved``, issue 27) may use up to its reservation; the message
    names the reservation either way."""
    limit = _limit(settings, reserved)
    cap = settings.max_memory_per_child
    if rss is None or limit is None or cap is None or rss <= limit:
        return None
    if reserved is None:
        return f"RSS {format_size(rss)} passed the {format_size(cap)} max_memory_per_child"
    if reserved >= cap:
        return (f"RSS {format_size(rss)} passed the job's {format_size(reserved)} memory "
                f"reservation (above the {format_size(cap)} max_memory_per_child)")
    return (f"RSS {format_size(rss)} passed the {format_size(cap)} max_memory_per_child "
            f"(the job reserved {format_size(reserved)})")


# How far over its limit (the cap, or the job's larger reservation) a running job's
# child may grow while its stop notice's grace runs: past this it is killed at once.
MEMORY_HARD_FACTOR = 1.5


def hard_over_memory(settings: PoolSettings, rss: int | None,
                     reserved: int | None = None) -> str | None:
    """Why a child over its limit must be killed now rather than told first: its RSS
    passed ``MEMORY_HARD_FACTOR`` times the limit (None: it did not)."""
    limit = _limit(settings, reserved)
    if rss is None or limit is None or rss <= int(limit * MEMORY_HARD_FACTOR):
        return None
    return f"{format_size(rss)} is over {MEMORY_HARD_FACTOR:g}x its limit: killed at once"


def peaked(oscalls: OsCalls, settings: PoolSettings, pid: int) -> bool:
    """Whether a child's peak RSS (VmHWM) ever passed the cap. A job that freed what it
    took leaves a low RSS but a grown, fragmented heap: recycle it all the same."""
    limit = settings.max_memory_per_child
    peak = oscalls.peak_rss(pid) if limit else None
    return peak is not None and limit is not None and peak > limit
