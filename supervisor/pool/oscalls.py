"""The one facade for every OS call the pool makes.

The pool's policy (deadlines, kills, recycling, crash loops) is tested against a fake
of this class and a fake clock; the real one is a thin pass-through. Errors that only
mean "that process is already gone" are absorbed here, so the policy reads plainly.
"""

from __future__ import annotations

import errno
import os
import time
from typing import NamedTuple

from shared.memlimit import ContainerMemory
from shared.procfs import GroupSample, descendants, group_sample, tree_rss
from workers.shm import remove_for_dead_child


class Reaped(NamedTuple):
    """One exited process collected: its pid (0: none had exited), its wait status, and
    the CPU seconds it and the children it reaped used over its life (user + system,
    ``wait4``'s rusage; None: unknown)."""

    pid: int
    status: int
    cpu_seconds: float | None = None


class OsCalls:
    """Process and pipe calls as the pool uses them. ``container``: the cgroup whose
    memory limit binds this process (``shared.memlimit.container_memory``), read for its
    usage and its OOM kills; None outside a container."""

    def __init__(self, container: ContainerMemory | None = None) -> None:
        self.container = container

    def fork(self) -> int:
        """``os.fork()``: 0 in the child, the child's pid in the parent."""
        return os.fork()

    def pipe(self) -> tuple[int, int]:
        """A new pipe (read end, write end); both ends close on exec."""
        return os.pipe()

    def set_blocking(self, fd: int, blocking: bool) -> None:
        """Make ``fd`` blocking or not."""
        os.set_blocking(fd, blocking)

    def close(self, fd: int) -> None:
        """Close ``fd``; an fd already closed is not an error."""
        try:
            os.close(fd)
        except OSError as exc:
            if exc.errno != errno.EBADF:
                raise

    # ``read(fd, size)`` raises BlockingIOError when nothing is there; ``write(fd,
    # data)`` returns what the pipe took, raises BlockingIOError when it is full and
    # BrokenPipeError when the reader is gone. The bare os functions, not wrappers: they
    # run for every frame, and a Python-level call there costs more than the syscall.
    read = staticmethod(os.read)
    write = staticmethod(os.write)

    def kill(self, pid: int, sig: int) -> bool:
        """Send ``sig`` to one process. False if it no longer exists."""
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return False
        return True

    def killpg(self, pgid: int, sig: int) -> bool:
        """Send ``sig`` to a process group. False if the group is empty."""
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:
            return False  # a zombie leader's group on some kernels: nothing to signal
        return True

    def setpgid(self, pid: int, pgid: int) -> None:
        """Put ``pid`` in group ``pgid``. The child does the same to itself; whichever
        runs first wins, and the loser's EACCES/ESRCH/EPERM mean it is already done
        or moot."""
        try:
            os.setpgid(pid, pgid)
        except (ProcessLookupError, PermissionError):
            pass

    def wait_any(self) -> Reaped:
        """``wait4(-1, WNOHANG)``: the exited process collected, or pid 0 when none
        has exited (or there are no children at all). The rusage comes with the same
        call: a dead child's CPU time costs nothing more."""
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return Reaped(0, 0)
        return Reaped(pid, status, usage.ru_utime + usage.ru_stime if pid else None)

    def rss(self, pid: int) -> int | None:
        """Resident set size of ``pid`` and its live descendants now, summed, in bytes
        (``/proc/<pid>/statm`` of each): a child's whole process tree, so an ffmpeg or
        a pool worker it started counts with it (issue 45). Pages they share are counted
        once per process, so the sum errs high. None if ``pid`` is gone."""
        return tree_rss(pid, _TREE_LIMIT)

    def memory_limit(self) -> int | None:
        """The container's memory limit in bytes (None: outside a container)."""
        return self.container.limit if self.container is not None else None

    def memory_usage(self) -> int | None:
        """The container's memory in use now, less its inactive file cache (None:
        outside a container, or unreadable)."""
        return self.container.usage() if self.container is not None else None

    def oom_kills(self) -> int | None:
        """How many processes the kernel's OOM killer has killed in the container so
        far (None: outside a container, or the kernel does not say)."""
        return self.container.oom_kills() if self.container is not None else None

    def peak_rss(self, pid: int) -> int | None:
        """The highest RSS ``pid`` has had (``VmHWM``), in bytes; None if it is gone."""
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmHWM:"):
                        return int(line.split()[1]) * 1024
        except (OSError, IndexError, ValueError):
            pass
        return None

    def escaped(self, pid: int) -> list[int]:
        """Descendants of ``pid`` outside its process group (they called ``setsid`` or
        ``setpgid``), which a signal to the group misses."""
        out: list[int] = []
        for kid in descendants(pid):
            try:
                if os.getpgid(kid) != pid:
                    out.append(kid)
            except ProcessLookupError:
                pass
        return out

    def group_sample(self, pid: int) -> GroupSample | None:
        """The CPU time ``pid`` and its descendants have used and its state
        (``/proc``); None if it cannot be read."""
        return group_sample(pid)

    def clear_shm(self, pid: int) -> int:
        """Remove what the dead child ``pid``'s pools left in /dev/shm
        (``workers.shm.remove_for_dead_child``); how many entries went."""
        try:
            return remove_for_dead_child(pid)
        except OSError:
            return 0

    def getpid(self) -> int:
        """This process's pid."""
        return os.getpid()


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
# The most processes of one child's tree summed per memory sample (a fork bomb must not
# keep the parent walking).
_TREE_LIMIT = 1000


# The pool's clock: monotonic seconds, never wall time (the function itself: a wrapper
# would cost a Python call on every frame).
monotonic = time.monotonic
