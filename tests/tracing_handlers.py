"""Handlers for the tracing tests (``--app tracing_handlers``), and the tracer provider
their supervisor uses: an SDK provider whose exporter appends every finished span, as
one JSON line, to the file named by ``TRACE_FILE``.

The provider is configured at import, in the parent before it forks (as an application
would in its --app module), so the parent's claim and settle spans and each child's
process spans land in the same file; every line names the pid that recorded it. The
file is opened for each export (``O_APPEND``), since a child closes the fds it
inherits. SimpleSpanProcessor exports as each span ends, so a span is in the file
before the job's outcome can reach the database.
"""

import os
import signal
import time

import orjson
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from workers import Snooze, current_job, job


def span_record(span) -> dict:
    """The parts of a finished span the tests check."""
    context = span.get_span_context()
    return {
        "pid": os.getpid(), "name": span.name, "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "parent_trace_id": f"{span.parent.trace_id:032x}" if span.parent else None,
        "attributes": dict(span.attributes or {}),
        "links": [{"trace_id": f"{link.context.trace_id:032x}",
                   "span_id": f"{link.context.span_id:016x}",
                   "attributes": dict(link.attributes or {})} for link in span.links],
        "events": [{"name": event.name, "attributes": dict(event.attributes or {})}
                   for event in span.events],
        "status": span.status.status_code.name, "description": span.status.description,
        "start": span.start_time, "end": span.end_time,
    }


class FileSpanExporter(SpanExporter):
    """Appends each span as a JSON line to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans) -> SpanExportResult:
        data = b"".join(orjson.dumps(span_record(span)) + b"\n" for span in spans)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


if os.environ.get("TRACE_FILE"):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(os.environ["TRACE_FILE"])))
    trace.set_tracer_provider(provider)


@job(queue="traced")
def traced_ok(n: int) -> dict:
    ctx = current_job()
    return {"n": n, "pid": os.getpid(), "attempt": ctx.attempt}


@job(queue="traced", max_attempts=1)
def traced_fail(message: str) -> None:
    raise ValueError(message)


@job(queue="traced")
def traced_snooze() -> None:
    raise Snooze(3600)


@job(queue="traced")
def traced_crash_once() -> int:
    """Killed by SIGKILL on its first attempt (a segfault, the OOM killer), fine after."""
    if current_job().attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return current_job().attempt


@job(queue="traced")
def traced_burst(n: int) -> int:
    return n


@job(queue="traced")
def traced_block_once(marker: str) -> str:
    """Blocks (until its supervisor is killed) the first time, returns after."""
    if not os.path.exists(marker):
        with open(marker, "w"):
            pass
        time.sleep(120)
    return "done"
