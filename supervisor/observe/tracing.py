"""The parent's spans (the ``otel`` extra, issue 15): one per claim, one per write.

Whether a supervisor traces is its ``otel`` setting (``--otel/--no-otel``, ``otel =`` in
the config file). The default, auto, traces when the ``--app`` modules imported
``opentelemetry``: an application that configured a tracer provider gets traces without
another switch, and a supervisor whose application never touches OpenTelemetry never
imports it, even where the package is installed. ``otel = true`` without the package
is a one-line error.

A claim statement takes many jobs at once, and one write settles many, so neither can
be a child of one job's trace. Each is a root span with a *link* to the trace context of
every job it took or settled (the messaging conventions' model for batch receives):

- ``receive <queue>`` (CONSUMER): from the moment the claim is sent to its answer, with
  ``messaging.batch.message_count``, linked to each claimed job (link attribute
  ``messaging.message.id``) and to each completion the claim carried (also
  ``pg_supervisor.write = "complete"``);
- ``settle`` (INTERNAL): one outbox write of completions, failures and releases,
  linked to the jobs it wrote.

The spans are recorded after the fact with explicit start and end times, so the loop
never holds a span open across turns. Jobs without a producer context are counted but
not linked. The contexts of jobs in flight are kept (parsed once, at the claim) until
their outcome is written, so a write can link them without carrying them through the
engine.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from shared.jobs import ClaimedJob
from shared.tracing import is_traceparent

log = logging.getLogger("supervisor.tracing")

SYSTEM = "pg-supervisor"  # messaging.system, and the instrumentation scope's name
MAX_REMEMBERED = 100_000  # contexts of jobs in flight; beyond this the oldest are dropped


class TracingUnavailable(RuntimeError):
    """``otel = true`` was asked for, but OpenTelemetry is not installed."""


def wants_tracing(setting: bool | None) -> bool:
    """Whether this supervisor traces: its ``otel`` setting, or with auto (None) whether
    the loaded application imported OpenTelemetry. Raises ``TracingUnavailable`` for
    ``true`` without the package."""
    if setting is None:
        return "opentelemetry" in sys.modules
    if setting:
        try:
            import opentelemetry.trace  # noqa: F401
        except ImportError:
            raise TracingUnavailable(
                "otel is on but OpenTelemetry is not installed: "
                "pip install 'pg-supervisor[otel]'") from None
    return setting


class JobTracer:
    """Records the claim and write spans; built only when tracing is on."""

    def __init__(self, tracer: Any = None) -> None:
        from opentelemetry import trace
        from opentelemetry.context import Context

        self._trace = trace
        self._root = Context()
        self._tracer = tracer or trace.get_tracer(SYSTEM)
        self._contexts: dict[int, Any] = {}  # job id -> SpanContext of its producer
        self.errors = 0  # spans that could not be recorded (the first is logged)

    @staticmethod
    def now() -> int:
        """The clock spans are stamped with (ns since the epoch)."""
        return time.time_ns()

    def claimed(self, queue: str, jobs: Sequence[ClaimedJob], carried: Iterable[int],
                started: int, error: BaseException | None = None) -> None:
        """One claim of ``queue`` sent at ``started`` and answered now: ``jobs`` taken,
        the completions of ``carried`` (job ids) written, unless it failed (``error``)."""
        try:
            self._claimed(queue, jobs, carried, started, error)
        except Exception:  # tracing must never stop the loop that runs the jobs
            self._failed("claim")

    def wrote(self, job_ids: Sequence[int], started: int,
              unwritten: Sequence[int] = ()) -> None:
        """One outbox write of the outcomes of ``job_ids``, begun at ``started``;
        ``unwritten`` of them are still pending (a statement failed, the database is
        away): they stay remembered for the next try and the span's status is ERROR."""
        try:
            self._wrote(job_ids, started, unwritten)
        except Exception:
            self._failed("settle")

    def remembered(self) -> int:
        """Jobs in flight whose producer context is kept for their write's link."""
        return len(self._contexts)

    def _failed(self, what: str) -> None:
        self.errors += 1
        if self.errors == 1:
            log.exception("could not record a %s span; later failures are only counted",
                          what)

    def _claimed(self, queue: str, jobs: Sequence[ClaimedJob], carried: Iterable[int],
                 started: int, error: BaseException | None) -> None:
        links = []
        for job in jobs:
            context = self._remember(job)
            if context is not None:
                links.append(self._trace.Link(context, {"messaging.message.id": str(job.id)}))
        if error is None:
            links.extend(self._written_links(carried, "complete"))
        attributes = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "receive",
            "messaging.operation.name": "claim",
            "messaging.destination.name": queue,
            "messaging.batch.message_count": len(jobs),
        }
        self._record(f"receive {queue}", self._trace.SpanKind.CONSUMER, started, attributes,
                     links, error)

    def _wrote(self, job_ids: Sequence[int], started: int, unwritten: Sequence[int]) -> None:
        left = set(unwritten)
        links = self._links(job_ids, "settle")
        self._forget(job_id for job_id in job_ids if job_id not in left)
        error = f"{len(left)} outcomes not written" if left else None
        attributes = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "settle",
            "messaging.operation.name": "write",
            "messaging.batch.message_count": len(job_ids),
        }
        self._record("settle", self._trace.SpanKind.INTERNAL, started, attributes, links,
                     error)

    def _record(self, name: str, kind: Any, started: int, attributes: dict, links: list,
                error: BaseException | str | None) -> None:
        span = self._tracer.start_span(name, context=self._root, kind=kind,
                                       attributes=attributes, links=links,
                                       start_time=started)
        if isinstance(error, BaseException):
            span.record_exception(error)
            error = f"{type(error).__name__}: {error}"
        if error is not None:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error))
        span.end()

    def _remember(self, job: ClaimedJob) -> Any:
        if job.trace_context is None:
            return None
        context = self._parse(job.trace_context)
        if context is not None:
            if len(self._contexts) >= MAX_REMEMBERED:
                del self._contexts[next(iter(self._contexts))]
            self._contexts[job.id] = context
        return context

    def _parse(self, text: str) -> Any:
        """The SpanContext in a stored carrier, or None if it holds none valid. Read
        here rather than by the propagator (a third of the cost per job): a link needs
        only the ids and flags, so tracestate is left out."""
        try:
            carrier = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        parent = carrier.get("traceparent") if isinstance(carrier, dict) else None
        if not isinstance(parent, str):
            return None
        parent = parent.strip()  # as the propagator does: header values may be padded
        if not is_traceparent(parent):
            return None
        return self._trace.SpanContext(int(parent[3:35], 16), int(parent[36:52], 16),
                                       is_remote=True,
                                       trace_flags=self._trace.TraceFlags(int(parent[53:55], 16)))

    def _links(self, job_ids: Iterable[int], write: str) -> list:
        contexts = self._contexts
        return [self._trace.Link(contexts[job_id], {"messaging.message.id": str(job_id),
                                                    "pg_supervisor.write": write})
                for job_id in job_ids if job_id in contexts]

    def _written_links(self, job_ids: Iterable[int], write: str) -> list:
        """Links to the jobs whose outcome is now written; they are forgotten."""
        job_ids = list(job_ids)
        links = self._links(job_ids, write)
        self._forget(job_ids)
        return links

    def _forget(self, job_ids: Iterable[int]) -> None:
        pop = self._contexts.pop
        for job_id in job_ids:
            pop(job_id, None)
