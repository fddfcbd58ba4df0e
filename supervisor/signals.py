"""Signals for a single-threaded selector loop: handlers only record.

The handler appends the signal number to a list; ``signal.set_wakeup_fd`` writes a byte
to a pipe the loop's selector watches, so a signal wakes ``select()`` at once and is then
handled in the loop, never inside the handler.

Before the loop exists, ``record_early`` keeps stop signals from being lost. As PID 1 in
a container (no init), the kernel drops every signal whose disposition is the default,
so a SIGTERM sent while Python imports and connects would vanish and the container hang
until its kill timeout. ``supervisor run`` calls it first thing; the inbox takes over
what it recorded when the arbiter installs it.

Each signal is stamped with its arrival (``time.monotonic``): one stop sent twice at once
(``timeout`` signals its child and then the child's process group; a shell script's trap
and an orchestrator both forward it) arrives as two SIGTERMs microseconds apart, and the
arbiter takes those within ``DUPLICATE_WINDOW`` of each other as one request.
"""

from __future__ import annotations

import os
import selectors
import signal
import time
from dataclasses import dataclass

# A SIGTERM this soon after the stop signal that began a drain is the same request, not
# "stop now". A SIGINT is a duplicate only far sooner: a terminal's Ctrl-C reaches a
# wrapper (``timeout``) and the supervisor together, and the wrapper forwards it, within
# a millisecond; a person's deliberate second Ctrl-C comes later than this.
DUPLICATE_WINDOW = 1.0
SIGINT_DUPLICATE_WINDOW = 0.1

# Signals recorded before any SignalInbox was installed (see ``record_early``).
_early: list[Received] = []
EARLY_SIGNALS = (signal.SIGTERM, signal.SIGQUIT)


@dataclass(frozen=True, slots=True)
class Received:
    """One signal and when it arrived (monotonic seconds; None: not known)."""

    signum: int
    at: float | None = None


def _record_early(signum: int, frame: object) -> None:
    now = time.monotonic()
    if _early:
        last = _early[-1]
        if (signum == signal.SIGTERM == last.signum and last.at is not None
                and now - last.at < DUPLICATE_WINDOW):
            return  # the same stop, delivered twice: one request
        # A second stop signal before the loop runs: start-up may be stuck (an app
        # import that hangs), so stop now, as a second TERM does once the loop runs.
        raise SystemExit(128 + signum)
    _early.append(Received(signum, now))


def record_early(signals: tuple[int, ...] = EARLY_SIGNALS) -> None:
    """Record ``signals`` from now until a ``SignalInbox`` is installed, which receives
    them; a second one before then exits at once (code 128 + signal), unless it is a
    SIGTERM within ``DUPLICATE_WINDOW`` of the first (the same stop delivered twice).
    Only signals left at their default disposition are taken. SIGINT is not among
    the defaults: Python already turns it into KeyboardInterrupt, so Ctrl-C during a
    slow start still interrupts at once."""
    for sig in signals:
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _record_early)


def take_early() -> list[int]:
    """Signals ``record_early`` recorded and nobody has taken yet, in order."""
    return [r.signum for r in _take_early_received()]


def _take_early_received() -> list[Received]:
    taken = _early[:]
    del _early[: len(taken)]
    return taken


class SignalInbox:
    """Records the given signals and wakes the selector when one arrives."""

    def __init__(self, signals: tuple[int, ...]) -> None:
        self.signals = signals
        self.received: list[Received] = []  # appended by the handler, one list: no race
        self._read_fd = self._write_fd = -1

    def install(self, selector: selectors.BaseSelector) -> None:
        """Start recording; the wakeup pipe is registered with ``data=self``."""
        self._read_fd, self._write_fd = os.pipe()
        for fd in (self._read_fd, self._write_fd):
            os.set_blocking(fd, False)
        selector.register(self._read_fd, selectors.EVENT_READ, data=self)
        signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        for sig in self.signals:
            signal.signal(sig, self._record)
        early = _take_early_received()
        if early:  # a stop signal came during start-up: handle it on the first turn
            self.received[:0] = early
            os.write(self._write_fd, b"\0")

    @property
    def wakeup_fd(self) -> int:
        """The read end of the wakeup pipe (-1 when not installed): a blocking wait
        that watches it learns of a signal at once (``supervisor.db.Interrupt``)."""
        return self._read_fd

    def _record(self, signum: int, frame: object) -> None:
        self.received.append(Received(signum, time.monotonic()))

    def has_pending(self) -> bool:
        """Whether a signal waits to be taken."""
        return bool(self.received)

    def handle_event(self, key: object, mask: int) -> None:
        """Empty the wakeup pipe (the signals themselves are in ``received``)."""
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass

    def take(self) -> list[int]:
        """Signals received since the last call, in order."""
        return [r.signum for r in self.take_received()]

    def take_received(self) -> list[Received]:
        """Signals received since the last call, in order, with when each arrived."""
        taken, self.received = self.received, []
        return taken

    def uninstall(self) -> None:
        """Restore default handlers and close the pipe."""
        signal.set_wakeup_fd(-1)
        for sig in self.signals:
            signal.signal(sig, signal.SIG_DFL)
        for fd in (self._read_fd, self._write_fd):
            if fd >= 0:
                os.close(fd)
        self._read_fd = self._write_fd = -1
