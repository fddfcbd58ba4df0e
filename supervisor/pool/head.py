"""The job at the head of a child's pipe, as the parent watches it: one record made
when the job reaches the head (sent to an empty child, or next in line after an answer
or a give-back), its clocks restarted at its START (``Head.start``), dropped at its
answer. Every deadline,
sign of life, stop notice and kill verdict of that job lives here, so a new head starts
from a clean record and nothing is reset field by field.

It decides nothing: ``ChildProcess`` keeps it and ``Pool`` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.jobs import ClaimedJob
from shared.procfs import GroupSample
from supervisor.pool.settings import PoolSettings

# A silent child whose group used at least this share of one CPU since the last look is
# busy, not hung (busy native code on a loaded machine still gets far more).
BUSY_CPU_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class Notice:
    """The stop notice sent to the running job (issue 28): its ``reason`` (on the
    wire), what a ``Stopping`` it lets out, or the kill, fails it as (``kind``), the
    words of that failure, and when it is killed unless it answered first (None: only
    a drain's grace bounds it)."""

    reason: str
    kind: str
    message: str
    deadline: float | None


@dataclass(frozen=True, slots=True)
class KillVerdict:
    """What the head job fails of if the child's kill ends it (the kill's kind and
    words), for when no answer comes first."""

    kind: str
    message: str


@dataclass(slots=True)
class Head:
    """The job a child runs, or is about to start, and everything the parent watches
    of it. ``armed_at`` is when its clock started: when it reached the head, then its
    START."""

    job: ClaimedJob
    armed_at: float
    timeout: float | None  # its hard timeout, resolved at claim (None: none)
    job_deadline: float | None
    beat_timeout: float  # silence past this is judged (its kind's, else the pool's)
    beat_deadline: float
    mem_deadline: float | None  # next RSS sample (None: memory is not sampled)
    started: bool = False  # its START came
    # Liveness: the last sign of life (a beat, or CPU time seen moving), the CPU
    # seconds of the child's group at the last look once silent (None: not looked yet)
    # and when, and whether it is known to be busy in native code (silent, CPU moving)
    # and since when.
    alive_at: float = 0.0
    cpu_seen: float | None = None
    cpu_seen_at: float = 0.0
    native: bool = False
    native_since: float = 0.0
    # When it overruns (its kind's p95 run time, issue 28): the jobs queued behind it
    # are recalled then. None: not started, or looked at already.
    recall_at: float | None = None
    overrun: bool = False  # it overran: its child takes no more jobs until it ends
    notice: Notice | None = None
    kill: KillVerdict | None = None

    @classmethod
    def arm(cls, job: ClaimedJob, now: float, settings: PoolSettings, *,
            kill: KillVerdict | None = None) -> Head:
        """The record of ``job`` reaching the head at ``now``: its timeout (None or 0:
        none), its heartbeat (until its START comes the start is awaited that long)
        and, when memory is watched, its first RSS sample. ``kill``: a verdict already
        passed on the child, which ends whichever job it holds."""
        # Positional: this runs once per job on the parent's hot path.
        timeout = job.timeout
        beat = job.heartbeat_timeout or settings.heartbeat_timeout
        return cls(job, now, timeout, now + timeout if timeout else None, beat, now + beat,
                   now + settings.memory_sample_interval() if settings.samples_memory
                   else None, False, now, None, now, False, now, None, False, None, kill)

    def start(self, now: float, settings: PoolSettings) -> None:
        """Its START came: its clocks (timeout, heartbeat, memory sample, liveness)
        count from ``now``. Nothing else is set before a START (a notice, an overrun
        and its watch need a started job), so this is the whole of the record's
        re-arming."""
        self.started = True
        self.armed_at = now
        timeout = self.timeout
        self.job_deadline = now + timeout if timeout else None
        self.beat_deadline = now + self.beat_timeout
        self.alive_at = now
        self.cpu_seen = None
        self.native = False
        if settings.samples_memory:
            self.mem_deadline = now + settings.memory_sample_interval()

    def deadlines(self) -> tuple[float | None, ...]:
        """Every deadline it carries (None: not set), in the order they are judged."""
        notice = self.notice
        return (self.job_deadline, self.beat_deadline,
                notice.deadline if notice is not None else None, self.mem_deadline,
                self.recall_at)

    def beat(self, now: float) -> None:
        """A heartbeat of this job: alive now, its silence window starts again."""
        self.beat_deadline = now + self.beat_timeout
        self.alive_at = now
        self.cpu_seen = None
        self.native = False

    def after_nap(self, now: float) -> None:
        """The parent did not run for a while: a fresh heartbeat window from ``now``."""
        self.alive_at = max(self.alive_at, now)
        self.cpu_seen = None
        self.beat_deadline = max(self.beat_deadline, now + self.beat_timeout)

    def silent(self, now: float, sample: GroupSample | None,
               settings: PoolSettings) -> str | None:
        """Its heartbeat deadline passed: judge it from ``sample`` (its child's group's
        CPU time and state, read now; None: unreadable). Returns why it is hung, or
        None when it is only busy (its CPU time moved: a handler holding the GIL in
        native code starves the heartbeat thread) or not judged yet (the first look
        takes the CPU baseline), its deadline moved to the next look. Hung: stopped
        (T), or neither beats nor CPU time moved for its heartbeat timeout, or still
        in uninterruptible sleep (D) then."""
        timeout = self.beat_timeout
        if sample is None:
            return f"no heartbeat for {timeout} s"
        state = sample.state
        if state in ("T", "t"):
            return f"stopped (state {state}), no heartbeat for {timeout} s"
        seen = self.cpu_seen
        first = seen is None
        # Moving means a real share of a CPU: a process whose threads only wait for
        # the GIL still wakes every switch interval, a fraction of a percent.
        used = 0.0 if seen is None else sample.cpu_seconds - seen
        if state != "D" and used > 0 and used >= BUSY_CPU_SHARE * (now - self.cpu_seen_at):
            self.alive_at = now
            if not self.native:
                self.native_since = self.cpu_seen_at
            self.native = True
        self.cpu_seen = sample.cpu_seconds
        self.cpu_seen_at = now
        if not first and now - self.alive_at >= timeout:
            if state == "D":
                return f"in uninterruptible sleep (state D), no heartbeat for {timeout} s"
            return f"no heartbeat and no CPU time for {timeout} s"
        self.beat_deadline = now + settings.cpu_probe(timeout)
        return None
