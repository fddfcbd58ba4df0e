"""What the pool does about memory (issues 28 and 51): each busy child's RSS against
its cap (``guards``), the container's usage against its limit (``pressure``), and the
kernel's OOM kills, told apart from the parent's own.

``MemoryWatch`` decides and the pool acts: it is handed the pool's ``kill`` and
``notify`` verbs and calls them on the child it judged; it never reaps, dispatches or
touches the pool's books.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Collection

from shared import jobs
from shared.units import format_size
from supervisor.pool import guards, pressure
from supervisor.pool.head import KillVerdict
from supervisor.pool.oscalls import OsCalls
from supervisor.pool.process import BUSY, KILLED, ChildProcess
from supervisor.pool.settings import PoolSettings

# The pool's verbs: kill(child, now, kind, message, signal) and
# notify(job id, reason, kind, message, grace) -> whether the notice was sent.
Kill = Callable[[ChildProcess, float, str, str, int], None]
Notify = Callable[[int, str, str, str, "float | None"], bool]


class MemoryWatch:
    """The memory guards of one pool: its children's caps, its container, its OOM
    kills."""

    def __init__(self, settings: PoolSettings, oscalls: OsCalls, log: logging.Logger, *,
                 kill: Kill, notify: Notify) -> None:
        self._settings = settings
        self._os = oscalls
        self._log = log
        self._kill = kill
        self._notify = notify
        # The container's OOM kills accounted for: each child found dead of a SIGKILL the
        # parent did not send, while the count is ahead of this, is one of them.
        self._oom_seen: int | None = None
        # The container's memory limit, read at start (None: no container limit).
        self._guard: pressure.ContainerGuard | None = None
        self._guard_told: set[int] = set()  # children the guard told to stop, by pid

    def start(self) -> None:
        """Read the container's OOM kill count and memory limit (the pool starts)."""
        self._oom_seen = self._os.oom_kills()
        limit = self._os.memory_limit()
        if limit is not None:
            self._guard = pressure.ContainerGuard(limit)

    def exited(self, child: ChildProcess, status: int) -> None:
        """``child`` was reaped with ``status``, before its jobs are wound up: an OOM
        kill becomes its running job's kill verdict."""
        self._oom_killed(child, status)
        self._guard_told.discard(child.pid)

    def sample(self, child: ChildProcess, children: Collection[ChildProcess],
               now: float) -> None:
        """Sample a busy child's RSS (its whole process tree's), and in a container the
        container's usage too (``_container``, at most every
        ``pressure.CHECK_INTERVAL``). Past the cap with its job running: the stop notice
        (issue 28), the kill ``kill_grace`` later unless the job ended first, and no
        more jobs for the child; killed at once when its job has not started, when it
        was told to stop already for another reason, or when it is far over the cap
        (``guards.hard_over_memory``)."""
        job = child.job
        reserved = job.memory if job is not None else None
        rss = self._os.rss(child.pid)
        child.killed_usage.rss_seen(rss)
        guard = self._guard
        if guard is not None and now >= guard.due:
            guard.due = now + pressure.CHECK_INTERVAL
            self._container(guard, children, now)
            if child.state != BUSY:
                return  # this very child was the one stopped
        why = guards.over_memory(self._settings, rss, reserved)
        if why is None:
            child.memory_sampled(now)
            return
        hard = guards.hard_over_memory(self._settings, rss, reserved)
        if hard is not None:
            # SIGKILL at once: a grace would only let it grow further.
            self._kill(child, now, jobs.FAIL_MEMORY, f"{why}; {hard}", signal.SIGKILL)
            return
        notice = child.head.notice if child.head is not None else None
        if notice is not None and notice.reason == "memory":
            child.memory_sampled(now)  # told already: its grace stands
            return
        grace = self._settings.kill_grace
        if grace > 0 and job is not None and child.started and notice is None:
            child.retire()  # whatever becomes of its job, the child is recycled after it
            self._notify(job.id, "memory", jobs.FAIL_MEMORY,
                        f"{why}; told to stop, killed after {grace:g} s", grace)
            self._log.info("%s: %s; its job %d is told to stop", child.describe(), why,
                           job.id)
            child.memory_sampled(now)
            return
        # Not started, or told to stop for another reason: a grace would not help.
        self._kill(child, now, jobs.FAIL_MEMORY, why, signal.SIGKILL)

    def _container(self, guard: pressure.ContainerGuard,
                   children: Collection[ChildProcess], now: float) -> None:
        """Read the container's usage; near its limit, stop the youngest running job
        before the kernel kills anything (``supervisor.pool.pressure``)."""
        usage = self._os.memory_usage()
        level = guard.level(usage)
        if level is None or usage is None:
            return
        if any(c.state == KILLED and c.head is not None and c.head.kill is not None
               and c.head.kill.kind == jobs.FAIL_MEMORY for c in children):
            return  # one is being killed for memory: its memory is on its way back
        running = [c for c in children if c.state == BUSY and c.started]
        # Told by their cap (not by this guard, whose notice stands until the kill line).
        told = [c for c in running if _told(c, "memory") and c.pid not in self._guard_told]
        if told or level == pressure.KILL:
            victim = max(told or running, key=_armed_at, default=None)
            if victim is None:
                return
            rss = self._os.rss(victim.pid)
            victim.killed_usage.rss_seen(rss)
            which = ("the youngest job told to stop over its cap" if told
                     else "the youngest job")
            why = (f"{guard.describe(usage)}: {which}, RSS "
                   f"{format_size(rss or victim.killed_usage.rss_peak)}, killed at once "
                   f"before the kernel's OOM killer")
            self._log.warning("%s: job %d: %s", victim.describe(), victim.jobs[0].id, why)
            self._kill(victim, now, jobs.FAIL_MEMORY, why, signal.SIGKILL)
            return
        quiet = [c for c in running if not _told(c)]
        victim = max(quiet, key=_armed_at, default=None)
        if victim is None:
            return
        rss = self._os.rss(victim.pid)
        victim.killed_usage.rss_seen(rss)
        grace = self._settings.kill_grace
        job = victim.jobs[0]
        why = (f"{guard.describe(usage)}: the youngest job, RSS {format_size(rss or 0)}, "
               f"told to stop, killed after {grace:g} s or at once near the limit")
        victim.retire()
        if self._notify(job.id, "memory", jobs.FAIL_MEMORY, why, grace):
            self._guard_told.add(victim.pid)
            self._log.warning("%s: job %d: %s", victim.describe(), job.id, why)

    def _oom_killed(self, child: ChildProcess, status: int) -> None:
        """A child running a job died of a SIGKILL the parent did not send while the
        container's OOM kill count moved: the kernel's OOM killer took it, and its job
        fails as ``memory`` (never poison nor a crash for the breaker), with the RSS the
        parent last saw (issue 51)."""
        head = child.head
        if (head is None or not head.started or head.kill is not None or child.sigkilled
                or not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGKILL):
            return
        kills = self._os.oom_kills()
        seen = self._oom_seen
        if kills is None or seen is None or kills <= seen:
            return
        self._oom_seen = seen + 1
        limit = self._os.memory_limit()
        within = f" (the container's {format_size(limit)} limit)" if limit else ""
        rss = child.killed_usage.rss_peak
        head.kill = KillVerdict(jobs.FAIL_MEMORY, (
            f"child {child.pid} killed by the kernel's OOM killer{within}; its process "
            f"tree's RSS last seen {format_size(rss) if rss else 'unknown'}"))
        self._log.warning("%s: %s", child.describe(), head.kill.message)


def _told(child: ChildProcess, reason: str | None = None) -> bool:
    """Its running job was sent a stop notice (for ``reason``, if one is named)."""
    head = child.head
    notice = head.notice if head is not None else None
    return notice is not None and (reason is None or notice.reason == reason)


def _armed_at(child: ChildProcess) -> float:
    """When the clock of the job at its head started (its START, once running)."""
    head = child.head
    return head.armed_at if head is not None else 0.0
