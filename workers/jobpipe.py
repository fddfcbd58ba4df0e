"""The child's ends of its pipes to the parent, guarded against what handlers do to fds.

Handler code runs in the same process as the child runtime, so it can close, replace or
fork the pipes the runtime answers on. Four guards keep each fault with the job that
caused it:

- The pipe ends move to high fd numbers (``HIGH_FD`` and up, close-on-exec) when the
  child starts, so a handler that closes "all the low fds" or opens files after closing
  some never lands on them by accident.
- ``intact()`` tells whether each fd is still open with the status flags it had (a pipe
  end shows ``O_RDONLY``/``O_WRONLY`` alone; a file or /dev/null put in its place shows
  ``O_LARGEFILE`` too), checked after every job: a handler that closed the read end
  costs only its own job (its answer says it is the last; the child leaves), and one
  that closed or replaced the write end gets no answer written into whatever now holds
  that number. ``fcntl(F_GETFL)`` costs ~0.35 µs; ``fstat`` would cost ~2 µs a call.
- ``detach`` runs in any copy a handler forks (``os.register_at_fork``): both ends are
  pointed at /dev/null there, so the copy can neither read the next job nor answer for
  one, and the runtime exits the copy as soon as the handler returns in it.
- The heartbeat thread checks ``write_intact()`` before each beat.
"""

from __future__ import annotations

import fcntl
import os
import resource

from shared import wire

HIGH_FD = 900  # where the pipe ends move to (lower if the fd limit is lower)

_fcntl = fcntl.fcntl
_F_GETFL = fcntl.F_GETFL


def _flags(fd: int) -> int | None:
    try:
        return _fcntl(fd, _F_GETFL)
    except OSError:
        return None


def _move_high(fd: int) -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    floor = HIGH_FD if soft == resource.RLIM_INFINITY else min(HIGH_FD, soft - 8)
    if floor <= fd:
        return fd
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor)
    os.close(fd)
    return high


class JobPipe:
    """The read end (RUN, STOP arrive) and write end (answers go) of one child."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd = read_fd = _move_high(read_fd)
        self.write_fd = write_fd = _move_high(write_fd)
        # The child looks for STOP and SKIP before each queued job without blocking
        # (workers.inbox); set before the flags are noted, so intact() expects it.
        os.set_blocking(read_fd, False)
        self._read_flags = _flags(read_fd)
        self._write_flags = _flags(write_fd)
        self.detached = False  # True in a copy forked by a handler

    def guard_forks(self) -> None:
        """From now on, every fork of this process detaches the copy (call once)."""
        os.register_at_fork(after_in_child=self.detach)

    def intact(self) -> tuple[bool, bool]:
        """(read end intact, write end intact): each fd still open as it was."""
        return (_flags(self.read_fd) == self._read_flags,
                _flags(self.write_fd) == self._write_flags)

    def write_intact(self) -> bool:
        """True if the write end is still open as it was."""
        return _flags(self.write_fd) == self._write_flags

    def write(self, data: bytes) -> None:
        """Write every byte of ``data`` to the parent (blocking)."""
        wire.write_all(self.write_fd, data)

    def detach(self) -> None:
        """In a forked copy: point both ends at /dev/null (only those still ours; a
        number the handler reused stays the handler's) and mark the copy."""
        self.detached = True
        try:
            null = os.open(os.devnull, os.O_RDWR)
        except OSError:
            return
        try:
            read_ok, write_ok = self.intact()
            if read_ok:
                os.dup2(null, self.read_fd, inheritable=False)
            if write_ok:
                os.dup2(null, self.write_fd, inheritable=False)
        except OSError:
            pass
        finally:
            os.close(null)
