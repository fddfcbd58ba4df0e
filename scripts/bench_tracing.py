"""An --app module for the tracing benchmark: turns OpenTelemetry on with the SDK's
BatchSpanProcessor and an exporter that only counts, so the figure is the cost of
making spans (in the parent and in each child), not of shipping them anywhere."""

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class CountingExporter(SpanExporter):
    """Drops spans after counting them."""

    def __init__(self) -> None:
        self.count = 0

    def export(self, spans) -> SpanExportResult:
        self.count += len(spans)
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(CountingExporter()))
trace.set_tracer_provider(provider)
