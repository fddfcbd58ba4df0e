"""The parent's metrics: ``SupervisorMetrics`` creates the product's metrics (all named
``supervisor_*``) in an exposition ``Registry`` and offers the few calls the loop makes
to record them. Outcomes are stated by the caller; nothing here infers them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shared import defaults
from supervisor.observe.exposition import Registry

OTHER_KIND = "other"  # the label value of every kind past the cap

# Five-fold steps from 5 ms to five minutes: few enough that a label set per kind stays
# cheap to render, wide enough for short jobs and long CPU jobs alike.
DURATION_BUCKETS = (0.005, 0.025, 0.1, 0.5, 2.5, 10, 60, 300)
# Waiting ranges wider than running: a backlog can hold jobs for an hour.
WAIT_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
# One claim statement: sub-millisecond when healthy, seconds when the database suffers.
CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


def _package_version() -> str:
    # Asked at the first render, not at start: a metadata lookup (with the import of
    # importlib.metadata) cost about 25 ms of CPU of every start-up (issue 31).
    from importlib import metadata

    try:
        return metadata.version("pg-supervisor")
    except metadata.PackageNotFoundError:
        return "unknown"


class SupervisorMetrics:
    """The parent's metrics and the calls its loop makes to record them.

    ``job`` arguments are ``shared.jobs.ClaimedJob`` (only ``queue`` and ``kind`` are
    read). Outcomes are stated by the caller, which has already decided them: this class
    never infers a retry or a discard from a failure kind or an attempt count.
    """

    def __init__(
        self, owner: str, version: str | None = None, registry: Registry | None = None,
        max_kinds: int = defaults.METRICS_MAX_KINDS,
    ) -> None:
        """``owner`` is this supervisor's lease owner id; ``version`` defaults to the
        installed package's version. At most ``max_kinds`` job kinds get a label value
        of their own; later kinds are counted as ``other`` (0: no kind label values at
        all, every kind is ``other``), so a deployment with thousands of kinds keeps a
        scrape small and its render cheap."""
        self.max_kinds = max_kinds
        self._kinds: set[str] = set()
        r = self.registry = registry if registry is not None else Registry()
        # What each counter means, so that it equals what supervisor.jobs says
        # (docs/operations.md, "Counters and the table"): a claim takes a lease, which ends
        # in a start (an attempt, as jobs.attempt counts them), a release unstarted, or
        # an expiry in a child's pipe; a started attempt completes or fails once.
        self._claimed = r.counter(
            "supervisor_jobs_claimed_total",
            "Leases taken: one per job per claim. A job released unstarted (released_total) "
            "is claimed again later and counted again; started_total counts attempts.",
            ["queue"])
        self._started = r.counter(
            "supervisor_jobs_started_total",
            "Attempts started in a child: what supervisor.jobs.attempt counts.",
            ["queue", "kind"])
        self._completed = r.counter(
            "supervisor_jobs_completed_total", "Jobs whose handler returned.", ["queue", "kind"]
        )
        self._failed = r.counter(
            "supervisor_jobs_failed_total",
            "Failed job attempts, by kind of failure (error, timeout, hung, crashed, ...): "
            "one per errors entry of an attempt. A poison discard adds no attempt; it is "
            "discarded_total's reason.",
            ["queue", "kind", "reason"],
        )
        self._retried = r.counter(
            "supervisor_jobs_retried_total",
            "Failed attempts scheduled for another attempt.",
            ["queue", "kind"],
        )
        self._discarded = r.counter(
            "supervisor_jobs_discarded_total",
            "Jobs discarded, by reason: the kind of the last errors entry (poison, or the "
            "last attempt's failure: attempts exhausted or a terminal failure).",
            ["queue", "kind", "reason"],
        )
        self._released = r.counter(
            "supervisor_jobs_released_total",
            "Claimed jobs given back unstarted (a drain, a paused queue or kind, a job "
            "too big for this supervisor), attempt not counted.",
            ["queue"],
        )
        self._kinds_tripped = r.counter(
            "supervisor_kind_breaker_trips_total",
            "Times this supervisor's crashes tripped a kind's circuit breaker (the kind is "
            "paused on every supervisor for breaker_cooldown).", ["kind"])
        self.rescued_jobs = 0  # as the counter below, for the run's closing summary
        self._rescued = r.counter(
            "supervisor_jobs_rescued_total",
            "Jobs this supervisor's maintenance rescued after their lease expired.",
        )
        self._reconciled = r.counter(
            "supervisor_jobs_reconciled_total",
            "Jobs a lost claim answer left running under this supervisor, given back "
            "unstarted after the reconnect.",
        )
        self._duration = r.histogram(
            "supervisor_job_duration_seconds",
            "Run time of a job attempt in a child, completed or failed.",
            ["queue", "kind"],
            buckets=DURATION_BUCKETS,
        )
        self._cpu = r.histogram(
            "supervisor_job_cpu_seconds",
            "CPU time (user + system, the child and what it started) of a job attempt "
            "that ran in a child, completed or failed.",
            ["queue", "kind"],
            buckets=DURATION_BUCKETS,
        )
        self._wait = r.histogram(
            "supervisor_job_wait_seconds",
            "Time from a job's run_at (or enqueue) to its claim.",
            ["queue"],
            buckets=WAIT_BUCKETS,
        )
        self._children = r.gauge("supervisor_children", "Live children by state.", ["state"])
        self._exits = r.counter(
            "supervisor_children_exits_total",
            "Children that ended, by reason (recycle, crashed, timeout, hung, killed, ...).",
            ["reason"],
        )
        self._claim = r.histogram(
            "supervisor_claim_seconds",
            "Latency of one claim statement.",
            buckets=CLAIM_BUCKETS,
        )
        self._renewals = r.counter(
            "supervisor_lease_renewals_total", "Job leases extended by this supervisor."
        )
        self._fenced = r.counter(
            "supervisor_fenced_writes_total",
            "Writes refused by the lease fence (stale attempt or lost lease).",
            ["operation"],
        )
        self._wakeups = r.counter(
            "supervisor_loop_wakeups_total",
            "Why the parent's loop woke: child (an answer or heartbeat), notify, claim (an "
            "answer from the database), signal, scrape, timer (a deadline, nothing ready).",
            ["reason"],
        )
        self._empty_claims = r.counter(
            "supervisor_claims_empty_total", "Claims that found no job.", ["queue"])
        self._rate_limited = r.counter(
            "supervisor_claims_rate_limited_total",
            "Claims not made (or made smaller) because the queue's rate limit had no token.",
            ["queue"],
        )
        self._refunded = r.counter(
            "supervisor_rate_tokens_refunded_total",
            "Rate-limit permits taken for a claim and given back unused.", ["queue"])
        self._db_up = r.gauge(
            "supervisor_database_up", "1 while the work connection is usable, else 0."
        )
        self._horizon_age = r.gauge(
            "supervisor_db_horizon_age_seconds",
            "How long the oldest snapshot, prepared transaction or slot of the queue's "
            "database has held the MVCC horizon (0: none), as last looked at.")
        self._dead_rows = r.gauge(
            "supervisor_db_jobs_dead_rows",
            "Dead row versions in supervisor.jobs, as the statistics last counted them.")
        self._info = r.gauge("supervisor_info", "This supervisor's identity.",
                             ["owner", "version"])
        self._identity: tuple[str, str | None] | None = (owner, version)  # version: at render
        self._children.set(0, state="busy")
        self._children.set(0, state="idle")
        self._db_up.set(0)

    def claimed(
        self, queue: str, n: int, seconds: float, wait_seconds: Iterable[float] = ()
    ) -> None:
        """One claim statement for ``queue`` took ``seconds`` and returned ``n`` jobs,
        which had waited ``wait_seconds`` each (``ClaimedJob.wait_seconds``)."""
        self._claim.record((), seconds)
        if n:
            key = (queue,)
            self._claimed.add(key, n)
            record = self._wait.record
            for wait in wait_seconds:
                record(key, wait)

    def _kind(self, kind: str) -> str:
        if kind in self._kinds:
            return kind
        if len(self._kinds) < self.max_kinds:
            self._kinds.add(kind)
            return kind
        return OTHER_KIND

    def job_done(self, job: Any, duration: float) -> None:
        """``job``'s handler returned after ``duration`` seconds: completed."""
        key = (job.queue, self._kind(job.kind))
        self._completed.add(key)
        self._duration.record(key, duration)

    def job_started(self, job: Any) -> None:
        """An attempt of ``job`` started in a child."""
        self._started.add((job.queue, self._kind(job.kind)))

    def job_cpu(self, job: Any, cpu_seconds: float) -> None:
        """An attempt of ``job`` that ran in a child used ``cpu_seconds`` of CPU."""
        self._cpu.record((job.queue, self._kind(job.kind)), cpu_seconds)

    def job_failed(
        self,
        job: Any,
        reason: str,
        *,
        retried: bool,
        discarded: bool,
        duration: float | None = None,
        discard_reason: str | None = None,
    ) -> None:
        """An attempt of ``job`` failed with ``reason`` (a ``shared.jobs.FAIL_*`` kind).

        The caller says what became of the job: ``retried`` when it goes back for
        another attempt, ``discarded`` when it will never run again; neither when it
        returns to available without counting the attempt (shutdown). ``duration`` is
        the attempt's run time if known (not for a rescued lease). ``discard_reason``:
        why a discarded job was (``poison``), if not for this failure.
        """
        if retried and discarded:
            raise ValueError("a failed job is retried or discarded, not both")
        kind = self._kind(job.kind)
        key = (job.queue, kind)
        self._failed.add((job.queue, kind, reason))
        if retried:
            self._retried.add(key)
        elif discarded:
            self._discarded.add((job.queue, kind, discard_reason or reason))
        if duration is not None:
            self._duration.record(key, duration)

    def released(self, queue: str, n: int = 1) -> None:
        """``n`` claimed jobs of ``queue`` went back to available unstarted."""
        if n:
            self._released.add((queue,), n)

    def woke(self, reason: str) -> None:
        """The loop woke for ``reason`` (see ``supervisor_loop_wakeups_total``)."""
        self._wakeups.add((reason,))

    def claim_empty(self, queue: str) -> None:
        """A claim for ``queue`` found nothing."""
        self._empty_claims.add((queue,))

    def rate_limited(self, queue: str) -> None:
        """``queue`` wanted to claim but its token bucket was empty or short."""
        self._rate_limited.add((queue,))

    def tokens_refunded(self, queue: str, n: int) -> None:
        """``n`` permits of ``queue`` went back unused."""
        if n:
            self._refunded.add((queue,), n)

    def kind_tripped(self, kind: str) -> None:
        """Crashes recorded here tripped ``kind``'s circuit breaker."""
        self._kinds_tripped.add((kind,))

    def rescued(self, n: int) -> None:
        """Maintenance rescued ``n`` jobs whose lease had expired."""
        if n:
            self._rescued.add((), n)
            self.rescued_jobs += n

    def reconciled(self, n: int) -> None:
        """``n`` jobs stranded by a lost claim answer were given back."""
        if n:
            self._reconciled.add((), n)

    def children(self, busy: int, idle: int) -> None:
        """The pool now has ``busy`` children running a job and ``idle`` ready ones."""
        self._children.set(busy, state="busy")
        self._children.set(idle, state="idle")

    def child_exit(self, reason: str) -> None:
        """A child ended for ``reason`` (recycle, crashed, timeout, hung, killed, ...)."""
        self._exits.add((reason,))

    def fenced(self, operation: str, n: int = 1) -> None:
        """``n`` writes of ``operation`` (complete, fail, renew, ...) hit the fence."""
        if n:
            self._fenced.add((operation,), n)

    def renewed(self, n: int) -> None:
        """``n`` leases were extended by one renewal statement."""
        if n:
            self._renewals.add((), n)

    def database_up(self, up: bool) -> None:
        """Whether the work connection is currently usable."""
        self._db_up.set(1 if up else 0)

    def horizon(self, held_seconds: float, dead_rows: int) -> None:
        """The last look at the MVCC horizon: how long it is held, and the dead row
        versions of the queue table."""
        self._horizon_age.set(held_seconds)
        self._dead_rows.set(dead_rows)

    def render(self) -> bytes:
        """Every metric in the text exposition format: the ``MetricsServer`` callback."""
        if self._identity is not None:
            owner, version = self._identity
            self._info.set(1, owner=owner, version=version or _package_version())
            self._identity = None
        return self.registry.render()
