"""The in-flight table: every claimed job from its claim to the write that ends it.

Jobs wait here between the claim and a free child (``waiting``), are counted while a
child runs them (``running``), and their outcomes wait here to be written in one
batched, fenced statement per kind of write (``pending``). Nothing in this module
talks to the database or to children; the loop moves jobs through it.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from shared import jobs
from shared.jobs import ClaimedJob
from supervisor.db.store import Completion, Failure

# Strings Postgres cannot store in text or jsonb (NUL) are replaced, so one odd error
# message can never wedge a whole batch of writes.
_NUL = "\x00"


def clean_text(value: str | None, limit: int = 64 * 1024) -> str | None:
    """Make an error message or traceback storable: no NUL bytes, bounded length."""
    if value is None:
        return None
    if _NUL in value:
        value = value.replace(_NUL, "\\x00")
    if len(value) > limit:
        value = value[: limit // 2] + "\n... [truncated] ...\n" + value[-limit // 2:]
    return value


@dataclass
class PendingWrites:
    """Outcomes not yet written, grouped by the statement that will write them."""

    completions: list[Completion] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    interrupts: list[Failure] = field(default_factory=list)
    releases: list[tuple[int, int]] = field(default_factory=list)
    progress: dict[int, tuple[int, dict]] = field(default_factory=dict)
    since: float | None = None  # when the oldest unwritten outcome arrived

    def count(self) -> int:
        """Outcomes waiting (progress reports excluded: they never block a flush)."""
        return (len(self.completions) + len(self.failures) + len(self.interrupts)
                + len(self.releases))

    def take(self) -> PendingWrites:
        """Hand over everything pending and start empty."""
        taken = PendingWrites(self.completions, self.failures, self.interrupts,
                              self.releases, self.progress, self.since)
        self.completions, self.failures, self.interrupts = [], [], []
        self.releases, self.progress, self.since = [], {}, None
        return taken

    def merge_back(self, other: PendingWrites) -> None:
        """Put writes that could not be made (database down) back in front."""
        self.completions[:0] = other.completions
        self.failures[:0] = other.failures
        self.interrupts[:0] = other.interrupts
        self.releases[:0] = other.releases
        for job_id, report in other.progress.items():
            self.progress.setdefault(job_id, report)
        if other.since is not None:
            self.since = other.since if self.since is None else min(self.since, other.since)


class Ledger:
    """Claimed jobs, per queue, and their unwritten outcomes."""

    def __init__(self) -> None:
        self.waiting: dict[str, deque[ClaimedJob]] = {}
        self.running: Counter[str] = Counter()
        self.pending = PendingWrites()
        self.finished = Counter()  # outcomes seen this run, by "completed"/"failed"/...

    # -- claimed, waiting for a child -------------------------------------------------
    def add_claimed(self, claimed: list[ClaimedJob]) -> None:
        """Jobs a claim returned, in the order they should start."""
        for job in claimed:
            self.waiting.setdefault(job.queue, deque()).append(job)

    def waiting_counts(self) -> dict[str, int]:
        """Jobs waiting for a child, per queue."""
        return {q: len(d) for q, d in self.waiting.items() if d}

    def pop_waiting(self, queue: str) -> ClaimedJob:
        """The next job of ``queue`` to start."""
        return self.waiting[queue].popleft()

    def unpop_waiting(self, job: ClaimedJob) -> None:
        """Put back a job that could not be dispatched after all."""
        self.waiting.setdefault(job.queue, deque()).appendleft(job)

    def waiting_jobs(self) -> list[ClaimedJob]:
        """Every waiting job (for lease renewal)."""
        return [job for d in self.waiting.values() for job in d]

    def drop_waiting(self, job_ids: set[int]) -> None:
        """Forget waiting jobs whose lease was lost: they are someone else's now."""
        if job_ids:
            for queue, queue_jobs in self.waiting.items():
                self.waiting[queue] = deque(j for j in queue_jobs if j.id not in job_ids)

    def release_waiting(self, now: float) -> int:
        """Drain: every claimed-but-unstarted job goes back, its attempt not counted."""
        released = 0
        for queue_jobs in self.waiting.values():
            while queue_jobs:
                job = queue_jobs.popleft()
                self.pending.releases.append((job.id, job.attempt))
                released += 1
        if released:
            self._touch(now)
        return released

    # -- running ------------------------------------------------------------------------
    def started(self, job: ClaimedJob) -> None:
        """A child took the job."""
        self.running[job.queue] += 1

    def outstanding(self) -> dict[str, int]:
        """Jobs held per queue (running or waiting): what capacity is measured against."""
        held = Counter(self.running)
        for queue, d in self.waiting.items():
            held[queue] += len(d)
        return dict(held)

    # -- outcomes -----------------------------------------------------------------------
    def done(self, job: ClaimedJob, result_json: str | None, now: float) -> None:
        """The handler returned: the job completes with its result."""
        self._ended(job)
        self.pending.completions.append(Completion(job.id, job.attempt, result_json))
        self.finished["completed"] += 1
        self._touch(now)

    def failed(self, job: ClaimedJob, kind: str, message: str, traceback: str | None,
               retry_delay: float | None, terminal: bool, now: float) -> None:
        """The attempt failed; shutdown interruptions go back without counting."""
        self._ended(job)
        failure = Failure(job.id, job.attempt, kind, clean_text(message) or kind,
                          clean_text(traceback), retry_delay,
                          terminal or kind in jobs.TERMINAL_FAILURES)
        if kind == jobs.FAIL_SHUTDOWN:
            self.pending.interrupts.append(failure)
            self.finished["interrupted"] += 1
        else:
            self.pending.failures.append(failure)
            self.finished["failed"] += 1
        self._touch(now)

    def progressed(self, job: ClaimedJob, progress: dict) -> None:
        """Latest progress of a running job, written with the next flush."""
        self.pending.progress[job.id] = (job.attempt, progress)

    def _ended(self, job: ClaimedJob) -> None:
        if self.running[job.queue] > 0:
            self.running[job.queue] -= 1
        self.pending.progress.pop(job.id, None)

    def _touch(self, now: float) -> None:
        if self.pending.since is None:
            self.pending.since = now

    def idle(self) -> bool:
        """Nothing claimed, nothing running, nothing left to write."""
        return (not any(self.waiting.values()) and not +self.running
                and self.pending.count() == 0)
