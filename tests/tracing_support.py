"""A tracer the test process owns (not installed globally), recording its spans in
memory: the producer's side of the traces the tracing tests follow."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@contextmanager
def memory_tracer(name: str) -> Iterator[tuple[object, InMemorySpanExporter]]:
    """``(tracer, exporter)``: spans the tracer ends are in ``exporter.get_finished_spans()``."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider.get_tracer(name), exporter
    finally:
        provider.shutdown()
