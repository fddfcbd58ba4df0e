"""What an attempt the parent ended itself cost, as the parent saw it.

A child measures its own jobs (``workers.usage``) and sends the usage with DONE and
FAILED. When the parent ends the attempt instead (timeout, hung, memory, a stop
notice's grace, cancel, shutdown) or the child dies (crashed), no answer comes: the
parent fills the usage from what it has seen of the child, at no extra cost on the
path where children answer:

- ``wall_seconds``: from the job's start (its START) to its end here.
- ``cpu_seconds``: the child's CPU time at its end, the larger of its process group's
  (``shared.procfs.group_sample``, live descendants included) read once at the kill and
  its own with the children it reaped (``wait4``'s rusage, free at the reap: a crashed
  child's exact figure), less a baseline: the group's CPU read once when the child
  said READY plus the CPU the child reported for each job it answered since (its meter
  counts from one job's end to the next, so that sum is the CPU it used between READY
  and the job's start). No ``/proc`` read per job. A lower bound: descendants still
  alive at a crash and processes that left the group are not counted. CPU that the
  child's descendants spent outside any job (a pool idling between jobs, leftovers
  between a job's end and the runtime's kill) is in no answer, so it lands here.
- ``max_rss_bytes``: the highest RSS the parent read for the child during the job
  (memory guard samples of its whole process tree, liveness samples, the sample at the
  kill): for a job killed over the memory cap, at least the RSS that passed it; for one
  the kernel's OOM killer took, the last sample before it. A lower bound: a peak between
  two samples is not seen. The same samples raise the ``max_rss_bytes`` a child
  reports (its own peak) to its tree's (``tree_peak``).
"""

from __future__ import annotations

from shared.procfs import GroupSample
from shared.usage import Usage


class KilledUsage:
    """One child's bookkeeping for the usage of an attempt the parent ends: the CPU
    baseline across its life, the last CPU and the highest RSS seen in its job."""

    __slots__ = ("base", "cpu_last", "rss_peak")

    def __init__(self) -> None:
        self.base: float | None = None  # group CPU at READY + CPU of answered jobs
        self.cpu_last: float | None = None  # group CPU at the last look in this job
        self.rss_peak = 0  # the highest RSS seen in this job, bytes

    def ready(self, sample: GroupSample | None) -> None:
        """The child said READY: its group's CPU now is where its jobs count from."""
        self.base = sample.cpu_seconds if sample is not None else None

    def answered(self, usage: Usage | None) -> None:
        """The child answered a job with ``usage``: later jobs count after it."""
        if usage is not None and self.base is not None:
            self.base += usage.cpu_seconds

    def armed(self) -> None:
        """A new job is at the head: forget the last one's samples."""
        self.cpu_last = None
        self.rss_peak = 0

    def sampled(self, sample: GroupSample | None) -> None:
        """The parent read the child's group during the job."""
        if sample is not None:
            self.cpu_last = sample.cpu_seconds
            if sample.rss_bytes > self.rss_peak:
                self.rss_peak = sample.rss_bytes

    def reaped(self, cpu_seconds: float | None) -> None:
        """The child was reaped having used ``cpu_seconds`` over its life (None:
        unknown): its CPU at its end, unless a group sample saw more."""
        if cpu_seconds is not None and (self.cpu_last is None
                                        or cpu_seconds > self.cpu_last):
            self.cpu_last = cpu_seconds

    def rss_seen(self, rss: int | None) -> None:
        """The memory guard read the child's RSS during the job."""
        if rss is not None and rss > self.rss_peak:
            self.rss_peak = rss

    def tree_peak(self, usage: Usage | None) -> Usage | None:
        """``usage`` as the child measured it (its own peak RSS), with the highest RSS
        of its whole process tree the parent sampled during the job when that is more:
        what a subprocess held counts as the job's (issue 45)."""
        peak = self.rss_peak
        if usage is None or peak <= usage.max_rss_bytes:
            return usage
        return usage._replace(max_rss_bytes=peak)

    def usage(self, wall_seconds: float) -> Usage:
        """The attempt's usage as seen from here (each figure a lower bound)."""
        base, last = self.base, self.cpu_last
        cpu = last - base if base is not None and last is not None else 0.0
        return Usage(max(cpu, 0.0), max(wall_seconds, 0.0), self.rss_peak)
