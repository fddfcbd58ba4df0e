"""The stop notice in the child (issue 28): ``current_job().stopping`` and, for handlers
that opted in with ``@job(on_stop="raise")``, ``workers.Stopping`` raised in the handler.

The parent's STOPPING frame is read by the heartbeat thread, which looks at the pipe
while a job runs (``JobRunner._listen``); it sets the job's ``stop_reason`` and, for an
opted-in handler, signals the main thread with ``SIGUSR2``. Why a signal, as for
``SoftTimeout`` (``workers.softtimer``): Python runs a signal handler in the main thread
at the next bytecode boundary, and a signal also interrupts a handler blocked in
``time.sleep``, a socket read or a ``wait``, where an asynchronous exception set from
another thread would not be seen until the call returned.

It cannot fire outside the handler: it is armed only around the call, and a signal that
slips in as the call returns is delivered in the runtime's own frames (``StopNotice.call``
or the soft timer's), which the signal handler recognises and ignores. Nor inside the
runtime's code that a handler calls (``checkpoint()`` writing a frame or reading the
pipe for its answer, where an exception could tear a frame or drop what was read): that
code runs ``shielded()``, and a notice that arrives meanwhile is raised as it leaves.

A handler that installs its own ``SIGUSR2`` handler takes this over (it then sees only
``current_job().stopping``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from workers.context import JobContext
from workers.outcomes import Stopping
from workers.softtimer import SoftTimer

NOTICE_SIGNAL = signal.SIGUSR2


class StopNotice:
    """Arms ``Stopping`` around one opted-in handler call at a time."""

    def __init__(self) -> None:
        self._context: JobContext | None = None  # of the armed call; None: none armed
        self.fired = False
        self._shield = 0  # inside the runtime's own code called from the handler
        self._pending = False  # the signal came while shielded: raise when it ends
        self._main = threading.main_thread().ident
        signal.signal(NOTICE_SIGNAL, self._on_signal)

    def call(self, context: JobContext, func: Callable[[], Any]) -> Any:
        """``func()`` with ``Stopping`` raised in it once the job's stop notice comes."""
        self.fired = False
        self._pending = False
        self._context = context
        try:
            if context.stop_reason is not None:  # the notice came before the call
                self.fired = True
                raise Stopping(context.stop_reason)
            return func()
        finally:
            self._context = None

    def noticed(self, context: JobContext, reason: str, raising: bool) -> None:
        """The parent's notice for ``context``'s job arrived (heartbeat thread)."""
        context.stop_reason = reason
        if raising and self._context is context and not self.fired and self._main:
            signal.pthread_kill(self._main, NOTICE_SIGNAL)

    @contextmanager
    def shielded(self) -> Iterator[None]:
        """Run the runtime's own code (called from a handler) without ``Stopping``
        inside it; one that came meanwhile is raised once it is done."""
        self._shield += 1
        try:
            yield
        finally:
            self._shield -= 1
        if not self._shield and self._pending:
            self._pending = False
            context = self._context
            if context is not None and not self.fired:
                self.fired = True
                raise Stopping(context.stop_reason or "stopping")

    def _on_signal(self, signum: int, frame: Any) -> None:
        context = self._context
        if (context is None or self.fired or frame is None
                or frame.f_code in _RUNTIME_CODES):
            return
        if self._shield:
            self._pending = True
            return
        self.fired = True
        raise Stopping(context.stop_reason or "stopping")


_RUNTIME_CODES = frozenset({StopNotice.call.__code__, SoftTimer.call.__code__})
