"""The child's span around each job (the ``otel`` extra, issue 15).

The parent decides whether jobs are traced and calls ``enable()`` before it forks, so
every child inherits the decision (as it inherits the handler registry). When tracing is
off, ``traced(run_job)`` returns ``run_job`` itself and OpenTelemetry is never imported
here: the per-job path is exactly what it was.

When on, each job runs in a CONSUMER span named ``process <kind>`` whose parent is the
trace context its producer stored (``shared.tracing``); a job without one (plain SQL,
a schedule, a batch callback) or with a carrier that does not parse gets a root span.
Attributes follow the OpenTelemetry messaging conventions where they fit
(``messaging.system``, ``messaging.operation.type``/``.name``,
``messaging.destination.name`` = the queue, ``messaging.message.id`` = the job id); the
job's kind, attempt and max_attempts have no convention and are ``pg_supervisor.job.*``.

A failed answer sets the span's status to ERROR and adds the conventional ``exception``
event (``exception.type``, ``exception.message``, ``exception.stacktrace``) from the
child's own report, so the error in the trace is the one stored in the job's errors.
A Snooze is not a failure: its span ends with status unset and a ``snooze`` event.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from shared import wire
from shared.jobs import FAIL_ERROR, FAIL_SNOOZE

SYSTEM = "pg-supervisor"  # messaging.system, and the instrumentation scope's name
_enabled = False

RunJob = Callable[[wire.Run], "wire.Done | wire.Failed"]


def enable() -> None:
    """Trace jobs in children forked from now on (called in the parent, before forking,
    once it decided to trace)."""
    global _enabled
    _enabled = True


def enabled() -> bool:
    """Whether this process traces its jobs."""
    return _enabled


def traced(run_job: RunJob) -> RunJob:
    """``run_job`` wrapped in a span per job, or ``run_job`` itself when tracing is off."""
    if not _enabled:
        return run_job
    return _JobSpans(run_job)


def finish(timeout_millis: int = 5000) -> None:
    """Export the spans still buffered, before the child leaves with ``os._exit`` (which
    skips the SDK's own exit hook). Nothing happens when tracing is off."""
    if not _enabled:
        return
    from opentelemetry import trace

    flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if flush is not None:
        try:
            flush(timeout_millis)
        except Exception:  # an exporter's trouble must not change the child's exit code
            pass


class _JobSpans:
    """``run_job`` with a span around each call."""

    def __init__(self, run_job: RunJob) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )

        self._run_job = run_job
        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()
        self._tracer = trace.get_tracer(SYSTEM)

    def __call__(self, run: wire.Run) -> wire.Done | wire.Failed:
        trace = self._trace
        attributes: dict[str, str | int] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": run.queue,
            "messaging.message.id": str(run.id),
            "pg_supervisor.job.kind": run.kind,
            "pg_supervisor.job.attempt": run.attempt,
            "pg_supervisor.job.max_attempts": run.max_attempts,
        }
        # Tracing must never cost a job: if the span cannot be made or ended, the job
        # still runs and its answer still goes back.
        try:
            scope = self._tracer.start_as_current_span(
                f"process {run.kind}", context=self._parent(run.trace_context),
                kind=trace.SpanKind.CONSUMER, attributes=attributes,
                record_exception=False, set_status_on_exception=True)
            span = scope.__enter__()
        except Exception:
            return self._run_job(run)
        try:
            answer = self._run_job(run)
            if isinstance(answer, wire.Failed):
                try:
                    _mark_failed(span, answer, trace)
                except Exception:
                    pass
            return answer
        finally:
            try:
                scope.__exit__(*sys.exc_info())
            except Exception:
                pass

    def _parent(self, carrier: Any) -> Any:
        """The producer's context, or an empty one (a root span) when there is none or
        it does not parse."""
        from opentelemetry.context import Context

        if not isinstance(carrier, dict):
            return Context()
        headers = {key: value for key in ("traceparent", "tracestate")
                   if isinstance(value := carrier.get(key), str)}
        return self._propagator.extract(headers, context=Context())


def _mark_failed(span: Any, answer: wire.Failed, trace: Any) -> None:
    span.set_attribute("pg_supervisor.job.failure", answer.kind)
    if answer.kind == FAIL_SNOOZE:
        span.add_event("snooze", {"pg_supervisor.snooze.delay": answer.retry_delay or 0.0})
        return
    error_type, message = _split_message(answer)
    event = {"exception.type": error_type, "exception.message": message}
    if answer.traceback:
        event["exception.stacktrace"] = answer.traceback
    span.add_event("exception", event)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{error_type}: {message}"))


def _split_message(answer: wire.Failed) -> tuple[str, str]:
    """(type, message): a raised exception's report reads ``Type: message``; other
    failures (binding, args, discard, retry, result) are named by their kind."""
    if answer.kind == FAIL_ERROR:
        error_type, sep, message = answer.message.partition(": ")
        if sep:
            return error_type, message
        return answer.message, ""
    return answer.kind, answer.message
