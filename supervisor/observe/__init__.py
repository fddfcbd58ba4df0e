"""The observability room: what the arbiter and the engine record into.

Door: ``SupervisorMetrics`` (the product's metrics), ``MetricsServer`` (``/metrics``
served from the parent's own loop), ``BurstProgress`` (the live line of ``--burst``) and
``configure_logging``, with ``job_fields`` (a job's id, kind, queue and attempt as keys
of a JSON log line) and ``error_line`` (a one-line error in the log's format).
"""

from supervisor.observe.httpserver import MetricsServer
from supervisor.observe.logs import configure_logging, error_line, job_fields
from supervisor.observe.metrics import SupervisorMetrics
from supervisor.observe.progress import BurstProgress

__all__ = ["BurstProgress", "MetricsServer", "SupervisorMetrics", "configure_logging",
           "error_line", "job_fields"]
