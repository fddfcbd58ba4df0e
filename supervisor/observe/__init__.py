"""The observability room: what the arbiter and the engine record into.

Door: ``SupervisorMetrics`` (the product's metrics), ``MetricsServer`` (``/metrics``
served from the parent's own loop), ``BurstProgress`` (the live line of ``--burst``) and
``configure_logging``.
"""

from supervisor.observe.httpserver import MetricsServer
from supervisor.observe.logs import configure_logging
from supervisor.observe.metrics import SupervisorMetrics
from supervisor.observe.progress import BurstProgress

__all__ = ["BurstProgress", "MetricsServer", "SupervisorMetrics", "configure_logging"]
