"""The observability room: what the arbiter and the engine record into.

Door: ``SupervisorMetrics`` (the product's metrics), ``MetricsServer`` (``/metrics``
served from the parent's own loop), ``BurstProgress`` (the live line of ``--burst``,
with ``Waits`` and ``Failures``; ``run_summary`` is the closing line's words) and
``configure_logging``, with ``job_fields`` (a job's id, kind, queue and attempt as keys
of a JSON log line) and ``error_line`` (a one-line error in the log's format).
``JobTracer`` records the claim and write spans when ``wants_tracing`` says the
supervisor traces (the ``otel`` extra; it imports OpenTelemetry only then).
"""

from supervisor.observe.httpserver import MetricsServer
from supervisor.observe.logs import configure_logging, error_line, job_fields
from supervisor.observe.metrics import SupervisorMetrics
from supervisor.observe.progress import BurstProgress, Failures, Waits
from supervisor.observe.progress import summary as run_summary
from supervisor.observe.tracing import JobTracer, TracingUnavailable, wants_tracing

__all__ = ["BurstProgress", "Failures", "JobTracer", "MetricsServer", "SupervisorMetrics",
           "TracingUnavailable", "Waits", "configure_logging", "error_line", "job_fields",
           "run_summary", "wants_tracing"]
