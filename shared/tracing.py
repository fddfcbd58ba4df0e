"""The trace context a job is enqueued under (the ``otel`` extra, issue 15).

A job remembers the W3C trace context (``traceparent``, ``tracestate``) that was current
where it was enqueued, in the ``trace_context`` column, so the child that runs it can
continue the producer's trace. The carrier is a JSON object of those headers, the form
any producer can write with plain SQL.

Nothing here imports OpenTelemetry unless the process already did: a process that never
imported ``opentelemetry`` cannot have a current span, so without the extra (or without
using it) an enqueue costs one dictionary look-up and stores NULL. The propagator is the
W3C one, not the process's global propagator: the column is a contract between
processes (and languages), so its format must not depend on one process's settings.

``supervisor enqueue`` has no span of its own; it stores ``TRACEPARENT``/``TRACESTATE``
from its environment (the convention for handing a trace to a command), checked here
without OpenTelemetry.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

import orjson

# version 00: 32 hex trace id and 16 hex span id, neither all zeros; 2 hex flags. Later
# versions may append fields after a dash (W3C trace context, "versioning").
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-"
                          r"[0-9a-f]{2}(-.*)?$")
_MAX_TRACESTATE = 512  # W3C: 32 members of bounded length; more is a broken carrier
# The context of the whole process when it has no span of its own (``supervisor
# enqueue`` sets it from its environment); None almost everywhere.
_process_context: str | None = None


def current_trace_context() -> str | None:
    """The current span's context as the JSON text of the ``trace_context`` column, or
    None when there is no valid current span (always None if OpenTelemetry was never
    imported in this process), unless the process was given one
    (``use_process_context``)."""
    if "opentelemetry" not in sys.modules:
        return _process_context
    return _from_current_span() or _process_context


_otel: tuple | None = None  # (get_current_span, the W3C propagator), once imported


def _from_current_span() -> str | None:
    global _otel
    if _otel is None:
        from opentelemetry.trace import get_current_span
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )

        _otel = (get_current_span, TraceContextTextMapPropagator())
    get_current_span, propagator = _otel
    span = get_current_span()
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagator.inject(carrier)
    return orjson.dumps(carrier).decode() if carrier else None


def keep_current_context(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call``, made to run later in the trace context current now (an enqueue deferred
    to a transaction's commit belongs to the span that asked for it). ``call`` itself
    when OpenTelemetry was never imported."""
    if "opentelemetry" not in sys.modules:
        return call
    from opentelemetry import context

    captured = context.get_current()

    def in_captured_context(*args: Any, **kwargs: Any) -> Any:
        token = context.attach(captured)
        try:
            return call(*args, **kwargs)
        finally:
            context.detach(token)

    return in_captured_context


def use_process_context(carrier: str | None) -> None:
    """Store ``carrier`` (column text) with every job this process enqueues outside a
    span of its own: a command run as one step of a traced pipeline."""
    global _process_context
    _process_context = carrier


def carrier_from_environment(environ: Mapping[str, str] = os.environ) -> str | None:
    """``TRACEPARENT`` (and ``TRACESTATE``) from the environment as column text, or None
    when unset. A malformed ``TRACEPARENT`` is a ``ValueError`` saying so."""
    parent = environ.get("TRACEPARENT", "").strip()
    if not parent:
        return None
    if not is_traceparent(parent):
        raise ValueError(f"TRACEPARENT is not a W3C traceparent: {parent[:80]!r}")
    carrier = {"traceparent": parent}
    state = environ.get("TRACESTATE", "").strip()
    if state:
        if len(state) > _MAX_TRACESTATE:
            raise ValueError(f"TRACESTATE is longer than {_MAX_TRACESTATE} characters")
        carrier["tracestate"] = state
    return orjson.dumps(carrier).decode()


def is_traceparent(value: str) -> bool:
    """Whether ``value`` has the shape of a W3C ``traceparent`` header (version 00 has
    exactly four fields; ff is never valid; later versions may add fields)."""
    if not _TRACEPARENT.match(value) or value.startswith("ff"):
        return False
    return len(value) == 55 or not value.startswith("00")
