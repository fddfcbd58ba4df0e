"""The soft timeout: ``SoftTimeout`` raised inside a running handler, before the
parent's hard timeout kills the child, so the handler can clean up.

Why ``SIGALRM`` and not a timer thread with ``PyThreadState_SetAsyncExc``: an
asynchronous exception is only seen between bytecodes, so a handler blocked in
``time.sleep``, a socket read or a ``subprocess.wait`` would not see it until the call
returned (often never, before the hard kill). A signal interrupts the blocking call; Python
runs the signal handler in the main thread, where the job handler runs, and the exception
it raises comes out of that call.

Why it cannot fire after the job: the timer is disarmed (``setitimer(0)``) as the call
returns, and a signal that slipped in before the disarm is delivered in the runtime's own
frame (``Guard.call``), which the signal handler recognises and ignores. A job's soft
timeout therefore never becomes the next job's exception, nor the runtime's.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from workers import context as context_module
from workers.outcomes import SoftTimeout


class SoftTimer:
    """Arms ``SIGALRM`` around one handler call at a time."""

    def __init__(self) -> None:
        self.seconds: float = 0.0  # of the call in progress; 0: none armed
        self.fired = False
        signal.signal(signal.SIGALRM, self._on_alarm)

    def call(self, seconds: float | None, func: Callable[..., Any], args: dict) -> Any:
        """``func(**args)`` with a soft timeout of ``seconds`` (None or 0: none)."""
        if not seconds or seconds <= 0:
            return func(**args)
        self.seconds = seconds
        self.fired = False
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return func(**args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.seconds = 0.0

    def _on_alarm(self, signum: int, frame: Any) -> None:
        # Only inside the handler: not in this module's own frames (before the call or
        # after it returned) and not once the call is over.
        if not self.seconds or self.fired or frame is None or frame.f_code is _CALL_CODE:
            return
        self.fired = True
        context = context_module._current
        if context is not None and context.stop_reason is None:
            context.stop_reason = "soft_timeout"  # current_job().stopping, for cleanup code
        raise SoftTimeout(f"soft timeout: the job ran past its {self.seconds:g} s soft limit")


_CALL_CODE = SoftTimer.call.__code__
