"""What a freshly forked child does before it takes work, and the OS helpers only a
child needs (parent-death signal, current RSS).

The steps of ``prepare_child`` run in a fixed order, each for a reason:

1. ``setpgrp``: the child leads its own process group, so the parent can kill the
   child together with anything its handler spawned.
2. ``PR_SET_PDEATHSIG``, then re-check ``getppid()``: if the parent dies the kernel
   signals the child, which kills its processes and itself (``workers.reaper``); the
   re-check covers a parent that died before the prctl.
3. Close every inherited fd but 0/1/2 and the child's own pipe ends. Only raw fds are
   closed (``os.closerange``): calling ``close()`` on the parent's psycopg or socket
   objects could send a protocol goodbye on the parent's connections.
4. Signal handlers back to their defaults: the parent's handlers only record signals
   for the parent's loop, which does not run here.
5. The process title, then a fresh ``random`` seed so siblings do not share one.
6. ``oom_score_adj`` raised to ``CHILD_OOM_SCORE_ADJ``: when the kernel's OOM killer
   must act (issue 51), it takes a child, whose job is retried and told as ``memory``,
   rather than the parent, whose death takes every child with it.
"""

from __future__ import annotations

import ctypes
import gc
import os
import random
import resource
import signal

from workers import reaper
from workers.proctitle import idle_title, set_title

PR_SET_PDEATHSIG = 1

# Loaded in the parent at import time, so a child need not dlopen after fork.
try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - every Linux libc has prctl
    _libc = None

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
# A child's ``/proc/self/oom_score_adj`` (-1000..1000): the OOM killer's first pick.
CHILD_OOM_SCORE_ADJ = 500


class ParentGone(Exception):
    """The parent died before the child armed its death signal."""


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies."""
    if _libc is None:
        raise OSError("libc not available for prctl")
    if _libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def close_inherited_fds(keep: set[int]) -> None:
    """Close every fd above 2 except those in ``keep``."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = soft if soft != resource.RLIM_INFINITY and soft > 0 else 1 << 20
    low = 3
    for fd in sorted(fd for fd in keep if fd >= 3):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, max(top, low))


def reset_signals() -> None:
    """Every catchable signal back to its default, and no wakeup fd."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        # Python ignores SIGPIPE so a broken pipe raises EPIPE instead of killing the
        # process; handler code expects that, so the child keeps it.
        disposition = signal.SIG_IGN if sig == signal.SIGPIPE else signal.SIG_DFL
        try:
            signal.signal(sig, disposition)
        except (OSError, ValueError):
            pass  # signals the kernel or Python will not let us touch


def prepare_child(worker_no: int, parent_pid: int, keep_fds: set[int]) -> None:
    """Post-fork setup, in the order the module docstring explains. Raises
    ``ParentGone`` if the parent died before the death signal was armed."""
    os.setpgrp()
    set_parent_death_signal(reaper.DEATH_SIGNAL)  # reaper.arm: kill its tree, then die
    if os.getppid() != parent_pid:
        raise ParentGone(f"parent {parent_pid} is gone")
    # The wakeup fd names a parent fd that is about to be closed (and may be reused).
    signal.set_wakeup_fd(-1)
    close_inherited_fds(keep_fds)
    reset_signals()
    reaper.arm()
    set_title(idle_title(worker_no))
    random.seed()
    prefer_as_oom_victim()
    # The parent froze its heap before forking so the child shares those pages;
    # collection in the child stays on for what handlers allocate.
    gc.enable()


def prefer_as_oom_victim() -> None:
    """Raise this process's ``oom_score_adj`` to ``CHILD_OOM_SCORE_ADJ`` (never lower
    it): any process may raise its own. Left as it is where /proc cannot be written."""
    # Plain fd calls: a text file object cost a new child 0.3-0.4 ms more here, most
    # of it pages its first use of the io stack copies (2026-12-06, 2 vCPU).
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if int(os.read(fd, 32).strip() or 0) < CHILD_OOM_SCORE_ADJ:
            os.pwrite(fd, str(CHILD_OOM_SCORE_ADJ).encode(), 0)
    except (OSError, ValueError):
        pass
    finally:
        os.close(fd)


def current_rss() -> int:
    """Resident set size of this process now, in bytes (from /proc/self/statm)."""
    with open("/proc/self/statm", "rb") as f:
        fields = f.read().split()
    return int(fields[1]) * _PAGE_SIZE
