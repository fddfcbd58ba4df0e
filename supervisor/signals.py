"""Signals for a single-threaded selector loop: handlers only record.

The handler appends the signal number to a list; ``signal.set_wakeup_fd`` writes a byte
to a pipe the loop's selector watches, so a signal wakes ``select()`` at once and is then
handled in the loop, never inside the handler.

Before the loop exists, ``record_early`` keeps stop signals from being lost. As PID 1 in
a container (no init), the kernel drops every signal whose disposition is the default,
so a SIGTERM sent while Python imports and connects would vanish and the container hang
until its kill timeout. ``supervisor run`` calls it first thing; the inbox takes over
what it recorded when the arbiter installs it.
"""

from __future__ import annotations

import os
import selectors
import signal

# Signals recorded before any SignalInbox was installed (see ``record_early``).
_early: list[int] = []
EARLY_SIGNALS = (signal.SIGTERM, signal.SIGQUIT)


def _record_early(signum: int, frame: object) -> None:
    if _early:
        # A second stop signal before the loop runs: start-up may be stuck (an app
        # import that hangs), so stop now, as a second TERM does once the loop runs.
        raise SystemExit(128 + signum)
    _early.append(signum)


def record_early(signals: tuple[int, ...] = EARLY_SIGNALS) -> None:
    """Record ``signals`` from now until a ``SignalInbox`` is installed, which receives
    them; a second one before then exits at once (code 128 + signal). Only signals left
    at their default disposition are taken. SIGINT is not among
    the defaults: Python already turns it into KeyboardInterrupt, so Ctrl-C during a
    slow start still interrupts at once."""
    for sig in signals:
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _record_early)


def take_early() -> list[int]:
    """Signals ``record_early`` recorded and nobody has taken yet, in order."""
    taken = _early[:]
    del _early[: len(taken)]
    return taken


class SignalInbox:
    """Records the given signals and wakes the selector when one arrives."""

    def __init__(self, signals: tuple[int, ...]) -> None:
        self.signals = signals
        self.pending: list[int] = []
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
        early = take_early()
        if early:  # a stop signal came during start-up: handle it on the first turn
            self.pending[:0] = early
            os.write(self._write_fd, b"\0")

    @property
    def wakeup_fd(self) -> int:
        """The read end of the wakeup pipe (-1 when not installed): a blocking wait
        that watches it learns of a signal at once (``supervisor.db.Interrupt``)."""
        return self._read_fd

    def _record(self, signum: int, frame: object) -> None:
        self.pending.append(signum)

    def handle_event(self, key: object, mask: int) -> None:
        """Empty the wakeup pipe (the signals themselves are in ``pending``)."""
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass

    def take(self) -> list[int]:
        """Signals received since the last call, in order."""
        taken, self.pending = self.pending, []
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
