"""The Prometheus text exposition format (0.0.4): counters, gauges and fixed-bucket
histograms, and the registry that renders them.

Hand-written rather than ``prometheus-client``: the parent needs these three kinds
rendered as text, a couple of hundred lines, while the client library brings threads,
locks, a multiprocess mode and a collector machinery that a single-threaded, fork-heavy
parent must then be careful never to touch.

Cost on the hot path is what matters: the parent records several samples per job at
tens of thousands of jobs per second. A sample is a dict lookup on the tuple of label
values and an addition (a ``bisect`` for a histogram bucket); nothing is formatted until
``Registry.render``. Not thread-safe, by design: the parent has no threads.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Sequence
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
