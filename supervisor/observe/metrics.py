"""Metrics of the parent process in the Prometheus text exposition format (0.0.4).

A hand-written registry rather than ``prometheus-client``: the parent needs counters,
gauges and fixed-bucket histograms rendered as text, which takes a couple of hundred lines,
while the client library brings threads, locks, a multiprocess mode and a collector
machinery that a single-threaded, fork-heavy parent must then be careful never to touch.

Cost on the hot path is what matters: the parent records several samples per job at
tens of thousands of jobs per second. A sample is a dict lookup on the tuple of label
values and an addition (a ``bisect`` for a histogram bucket); nothing is formatted until
``Registry.render``. Not thread-safe, by design: the parent has no threads.

``SupervisorMetrics`` creates the product's metrics (all named ``supervisor_*``) and the
few methods the parent loop calls.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from importlib import metadata
from typing import Any, TypeVar

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_M = TypeVar("_M", bound="Metric")


def _escape_label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    """A sample value as the format spells it (``+Inf``, ``NaN``, ints without ``.0``)."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


class Metric:
    """One metric family: a name, help text, fixed label names and a sample per distinct
    tuple of label values. Label values are rendered with ``str()``; pass strings."""

    kind = "untyped"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        if not _NAME_RE.match(name):
            raise ValueError(f"invalid metric name {name!r}")
        labelnames = tuple(labelnames)
        for label in labelnames:
            if not _LABEL_RE.match(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} for metric {name}")
        if len(set(labelnames)) != len(labelnames):
            raise ValueError(f"duplicate label name for metric {name}: {labelnames}")
        self.name = name
        self.help = help
        self.labelnames = labelnames
        # A metric without labels has its one sample from the start: it renders as 0.
        self._values: dict[tuple, Any] = {} if labelnames else {(): 0}

    def _key(self, labels: dict[str, Any]) -> tuple:
        names = self.labelnames
        if len(labels) != len(names):
            raise ValueError(f"{self.name} takes labels {names}, got {tuple(labels)}")
        try:
            return tuple([labels[n] for n in names])
        except KeyError:
            raise ValueError(f"{self.name} takes labels {names}, got {tuple(labels)}")

    def _labels(self, key: tuple, extra: str = "") -> str:
        parts = [f'{n}="{_escape_label(v)}"' for n, v in zip(self.labelnames, key, strict=True)]
        if extra:
            parts.append(extra)
        return "{" + ",".join(parts) + "}" if parts else ""

    def value(self, **labels: Any) -> Any:
        """The current value for these labels (0 if never recorded); for tests and
        the terminal progress line, not for the hot path."""
        return self._values.get(self._key(labels), 0)

    def render(self, out: list[str]) -> None:
        """Append this family's HELP, TYPE and sample lines to ``out``."""
        out.append(f"# HELP {self.name} {_escape_help(self.help)}\n")
        out.append(f"# TYPE {self.name} {self.kind}\n")
        values = self._values
        for key in sorted(values, key=lambda k: tuple(map(str, k))):
            self._render_sample(key, values[key], out)

    def _render_sample(self, key: tuple, value: Any, out: list[str]) -> None:
        out.append(f"{self.name}{self._labels(key)} {_number(value)}\n")


class Counter(Metric):
    """A value that only goes up. ``add`` is the positional fast path of ``inc``."""

    kind = "counter"

    def inc(self, amount: float = 1, **labels: Any) -> None:
        """Add ``amount`` (not negative) to the sample for ``labels``."""
        self.add(self._key(labels), amount)

    def add(self, key: tuple, amount: float = 1) -> None:
        """Add ``amount`` to the sample whose label values are ``key``, in
        ``labelnames`` order. The caller guarantees the key's length."""
        if amount < 0:
            raise ValueError(f"{self.name}: a counter cannot decrease ({amount})")
        values = self._values
        values[key] = values.get(key, 0) + amount


class Gauge(Metric):
    """A value that is set to whatever it currently is."""

    kind = "gauge"

    def set(self, value: float, **labels: Any) -> None:
        """Set the sample for ``labels`` to ``value``."""
        self._values[self._key(labels)] = value


class Histogram(Metric):
    """Observations counted into fixed cumulative buckets, with their sum and count.

    Each sample is stored as a list of per-bucket counts (not cumulative, one extra slot
    for ``+Inf``) followed by the sum; cumulation happens only at render time.
    """

    kind = "histogram"

    def __init__(
        self, name: str, help: str, labelnames: Sequence[str] = (), *, buckets: Sequence[float]
    ) -> None:
        super().__init__(name, help, labelnames)
        if "le" in self.labelnames:
            raise ValueError(f"{name}: a histogram cannot have a label named 'le'")
        bounds = [float(b) for b in buckets if not math.isinf(b)]
        if not bounds or bounds != sorted(set(bounds)):
            raise ValueError(f"{name}: buckets must be increasing and non-empty: {buckets}")
        self.buckets = tuple(bounds)
        if not self.labelnames:
            self._values[()] = [0] * (len(bounds) + 1) + [0.0]

    def observe(self, value: float, **labels: Any) -> None:
        """Record one observation for ``labels``."""
        self.record(self._key(labels), value)

    def record(self, key: tuple, value: float) -> None:
        """Positional fast path of ``observe``; ``key`` in ``labelnames`` order."""
        slots = self._values.get(key)
        if slots is None:
            slots = self._values[key] = [0] * (len(self.buckets) + 1) + [0.0]
        # bisect_left: a value equal to a bound belongs to that bucket (le means <=).
        slots[bisect_left(self.buckets, value)] += 1
        slots[-1] += value

    def value(self, **labels: Any) -> Any:
        """``(count, sum)`` for these labels; ``(0, 0.0)`` if never observed."""
        slots = self._values.get(self._key(labels))
        return (0, 0.0) if slots is None else (sum(slots[:-1]), slots[-1])

    def _render_sample(self, key: tuple, slots: list, out: list[str]) -> None:
        name = self.name
        running = 0
        # Bounds always carry a decimal point (le="1.0"), as Prometheus' own clients
        # write them, so that series keep the same identity across exporters.
        for bound, count in zip((*map(repr, self.buckets), "+Inf"), slots, strict=False):
            running += count
            labels = self._labels(key, 'le="' + bound + '"')
            out.append(f"{name}_bucket{labels} {running}\n")
        plain = self._labels(key)
        out.append(f"{name}_sum{plain} {_number(slots[-1])}\n")
        out.append(f"{name}_count{plain} {running}\n")


class Registry:
    """An ordered set of metric families with unique names, rendered together."""

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}

    def register(self, metric: _M) -> _M:
        """Add ``metric``; a second metric with the same name is an error."""
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name} is already registered")
        self._metrics[metric.name] = metric
        return metric

    def counter(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Counter:
        """Create and register a counter."""
        return self.register(Counter(name, help, labelnames))

    def gauge(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Gauge:
        """Create and register a gauge."""
        return self.register(Gauge(name, help, labelnames))

    def histogram(
        self, name: str, help: str, labelnames: Sequence[str] = (), *, buckets: Sequence[float]
    ) -> Histogram:
        """Create and register a histogram with fixed ``buckets`` (``+Inf`` is implied)."""
        return self.register(Histogram(name, help, labelnames, buckets=buckets))

    def get(self, name: str) -> Metric:
        """The metric registered under ``name`` (KeyError if none)."""
        return self._metrics[name]

    def render(self) -> bytes:
        """Every metric in the text exposition format 0.0.4, UTF-8 encoded."""
        out: list[str] = []
        for metric in self._metrics.values():
            metric.render(out)
        return "".join(out).encode("utf-8")


# Log-spaced from a millisecond to the ten-minute mark: short jobs and long CPU jobs alike.
DURATION_BUCKETS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 60, 120, 300, 600)
# Waiting ranges wider than running: a backlog can hold jobs for an hour.
WAIT_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
# One claim statement: sub-millisecond when healthy, seconds when the database suffers.
CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


def _package_version() -> str:
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
        self, owner: str, version: str | None = None, registry: Registry | None = None
    ) -> None:
        """``owner`` is this supervisor's lease owner id; ``version`` defaults to the
        installed package's version."""
        r = self.registry = registry if registry is not None else Registry()
        self._claimed = r.counter(
            "supervisor_jobs_claimed_total", "Jobs claimed from the queue.", ["queue"]
        )
        self._completed = r.counter(
            "supervisor_jobs_completed_total", "Jobs whose handler returned.", ["queue", "kind"]
        )
        self._failed = r.counter(
            "supervisor_jobs_failed_total",
            "Failed job attempts, by kind of failure (error, timeout, hung, crashed, ...).",
            ["queue", "kind", "reason"],
        )
        self._retried = r.counter(
            "supervisor_jobs_retried_total",
            "Failed attempts scheduled for another attempt.",
            ["queue", "kind"],
        )
        self._discarded = r.counter(
            "supervisor_jobs_discarded_total",
            "Jobs discarded: attempts exhausted or a terminal failure.",
            ["queue", "kind"],
        )
        self._released = r.counter(
            "supervisor_jobs_released_total",
            "Claimed jobs given back unstarted (drain), attempt not counted.",
            ["queue"],
        )
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
        self._db_up = r.gauge(
            "supervisor_database_up", "1 while the work connection is usable, else 0."
        )
        info = r.gauge("supervisor_info", "This supervisor's identity.", ["owner", "version"])
        info.set(1, owner=owner, version=version or _package_version())
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

    def job_done(self, job: Any, duration: float) -> None:
        """``job``'s handler returned after ``duration`` seconds: completed."""
        key = (job.queue, job.kind)
        self._completed.add(key)
        self._duration.record(key, duration)

    def job_failed(
        self,
        job: Any,
        reason: str,
        *,
        retried: bool,
        discarded: bool,
        duration: float | None = None,
    ) -> None:
        """An attempt of ``job`` failed with ``reason`` (a ``shared.jobs.FAIL_*`` kind).

        The caller says what became of the job: ``retried`` when it goes back for
        another attempt, ``discarded`` when it will never run again; neither when it
        returns to available without counting the attempt (shutdown). ``duration`` is
        the attempt's run time if known (not for a rescued lease).
        """
        if retried and discarded:
            raise ValueError("a failed job is retried or discarded, not both")
        key = (job.queue, job.kind)
        self._failed.add((job.queue, job.kind, reason))
        if retried:
            self._retried.add(key)
        elif discarded:
            self._discarded.add(key)
        if duration is not None:
            self._duration.record(key, duration)

    def released(self, queue: str, n: int = 1) -> None:
        """``n`` claimed jobs of ``queue`` went back to available unstarted."""
        if n:
            self._released.add((queue,), n)

    def rescued(self, n: int) -> None:
        """Maintenance rescued ``n`` jobs whose lease had expired."""
        if n:
            self._rescued.add((), n)

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

    def render(self) -> bytes:
        """Every metric in the text exposition format: the ``MetricsServer`` callback."""
        return self.registry.render()
