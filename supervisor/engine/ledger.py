"""The ledger: every job this supervisor holds, from its claim until a child ends it.

Jobs wait here between the claim and a free child (``waiting``, per queue, in the order
they should start), are counted while queued in a child's pipe (``in_pipes``: sent, not
started) and while a child runs them (``running``: its START came). What happens to a
job afterwards belongs to the outbox. Nothing here talks to the database or to
children; the engine moves jobs through it.
"""

from __future__ import annotations

from collections import Counter, deque

from shared.jobs import ClaimedJob
from supervisor.admission import Admission


class Ledger:
    """Claimed jobs per queue: waiting for a child, or running."""

    def __init__(self, admission: Admission | None = None) -> None:
        # Charges of jobs sent to children, freed here as each ends or comes back.
        self.admission = admission
        self.waiting: dict[str, deque[ClaimedJob]] = {}
        self.running: Counter[str] = Counter()  # started in a child (one per busy child)
        self.in_pipes: Counter[str] = Counter()  # sent to a child, not started yet
        self.finished: Counter[str] = Counter()  # outcomes this run: completed, failed, ...

    # -- claimed, waiting for a child -------------------------------------------------
    def add_claimed(self, claimed: list[ClaimedJob]) -> None:
        """Jobs a claim returned, in the order they should start."""
        for job in claimed:
            self.waiting.setdefault(job.queue, deque()).append(job)

    def waiting_counts(self) -> dict[str, int]:
        """Jobs waiting for a child, per queue."""
        return {q: len(d) for q, d in self.waiting.items() if d}

    def has_waiting(self) -> bool:
        """Whether any job waits for a child."""
        return any(self.waiting.values())

    def take_waiting_at(self, queue: str, index: int) -> ClaimedJob:
        """The waiting job of ``queue`` at ``index`` (admission may start a later job
        before an earlier one that does not fit), removed."""
        queue_jobs = self.waiting[queue]
        job = queue_jobs[index]
        del queue_jobs[index]
        return job

    def pop_waiting(self, queue: str) -> ClaimedJob | None:
        """The next job of ``queue`` to start, or None."""
        queue_jobs = self.waiting.get(queue)
        return queue_jobs.popleft() if queue_jobs else None

    def to_front(self, job: ClaimedJob) -> None:
        """Move a waiting job to the front of its queue's order (a newcomer batch's
        first job in a fair queue goes next)."""
        queue_jobs = self.waiting[job.queue]
        queue_jobs.remove(job)
        queue_jobs.appendleft(job)

    def unpop_waiting(self, job: ClaimedJob) -> None:
        """Put back a job that could not be dispatched after all."""
        self.waiting.setdefault(job.queue, deque()).appendleft(job)

    def batches_waiting(self, queue: str) -> set[int]:
        """The batches of ``queue``'s jobs waiting for a child."""
        return {job.batch_id for job in self.waiting.get(queue, ())
                if job.batch_id is not None}

    def waiting_jobs(self) -> list[ClaimedJob]:
        """Every waiting job (for lease renewal)."""
        return [job for d in self.waiting.values() for job in d]

    def drop_waiting(self, job_ids: set[int]) -> None:
        """Forget waiting jobs that are no longer ours (lease lost, cancelled)."""
        if job_ids:
            for queue, queue_jobs in self.waiting.items():
                self.waiting[queue] = deque(j for j in queue_jobs if j.id not in job_ids)

    def take_waiting(self, queue: str | None = None) -> list[ClaimedJob]:
        """Every claimed-but-unstarted job (of ``queue``, or all), removed: they go back
        (drain, a paused queue)."""
        if queue is not None:
            return list(self.waiting.pop(queue, ()))
        taken = self.waiting_jobs()
        self.waiting.clear()
        return taken

    # -- running ------------------------------------------------------------------------
    def sent(self, job: ClaimedJob) -> None:
        """The job went into a child's pipe; it has not started."""
        self.in_pipes[job.queue] += 1

    def started(self, job: ClaimedJob) -> None:
        """The child took the job from its pipe (its START)."""
        if self.in_pipes[job.queue] > 0:
            self.in_pipes[job.queue] -= 1
        self.running[job.queue] += 1

    def returned(self, job: ClaimedJob) -> None:
        """A child gave the job back unstarted; where it goes next is the caller's."""
        if self.in_pipes[job.queue] > 0:
            self.in_pipes[job.queue] -= 1
        admission = self.admission
        if admission is not None and admission.charged:
            admission.release(job.id)

    def ended(self, job: ClaimedJob, outcome: str) -> None:
        """A child finished with the job; ``outcome`` is counted for the run's summary."""
        if self.running[job.queue] > 0:
            self.running[job.queue] -= 1
        self.finished[outcome] += 1
        admission = self.admission
        if admission is not None and admission.charged:
            admission.release(job.id)

    def outstanding(self) -> dict[str, int]:
        """Jobs held per queue (running, in a pipe or waiting): what capacity is
        measured against."""
        held = self.running + self.in_pipes
        for queue, d in self.waiting.items():
            held[queue] += len(d)
        return dict(held)

    def unstarted_counts(self) -> dict[str, int]:
        """Claimed jobs not started yet per queue: waiting here or queued in a pipe."""
        counts = +self.in_pipes
        for queue, d in self.waiting.items():
            counts[queue] += len(d)
        return {q: n for q, n in counts.items() if n}

    def idle(self) -> bool:
        """Nothing waiting, nothing in a pipe, nothing running."""
        return (not any(self.waiting.values()) and not +self.running
                and not +self.in_pipes)
