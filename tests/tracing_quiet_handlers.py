"""A handler module that never touches OpenTelemetry (``--app tracing_quiet_handlers``):
its one handler reports which ``opentelemetry`` modules its child has loaded."""

import sys

from workers import job


def otel_modules() -> list[str]:
    """Names of the loaded modules of the ``opentelemetry`` package."""
    return sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")


@job(queue="quiet")
def loaded_otel_modules() -> list[str]:
    return otel_modules()
