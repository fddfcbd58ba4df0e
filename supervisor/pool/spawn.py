"""How one child comes to exist: fresh pipes, its config, the fork, and the parent's two
ends made ready for the selector loop. Whether to fork at all is ``Pool``'s policy; the
parent's ends are wrapped in a ``ChildProcess`` there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import NamedTuple

from shared.exitcodes import CHILD_BOOT_ERROR
from supervisor.pool.oscalls import OsCalls
from supervisor.pool.settings import PoolSettings
from workers.child import ChildConfig


class Forked(NamedTuple):
    """A child just forked: its pid and the parent's ends of its two pipes."""

    pid: int
    read_fd: int  # its frames arrive here
    write_fd: int  # RUN, SKIP and STOP go out here


def fork_child(oscalls: OsCalls, settings: PoolSettings, *, worker_no: int,
               max_jobs: int | None, parent_pid: int,
               entry: Callable[[ChildConfig], object]) -> Forked:
    """Fork one child with fresh pipes; return its pid and the parent's ends, both
    non-blocking. In the child, ``entry`` runs and the process leaves by
    ``os._exit``; this function never returns there."""
    down_r, down_w = oscalls.pipe()  # parent -> child
    try:
        up_r, up_w = oscalls.pipe()  # child -> parent
    except OSError:
        oscalls.close(down_r)
        oscalls.close(down_w)
        raise
    config = ChildConfig(
        worker_no=worker_no,
        parent_pid=parent_pid,
        read_fd=down_r,
        write_fd=up_w,
        heartbeat_interval=settings.heartbeat_interval,
        max_jobs=max_jobs,
        max_memory=settings.max_memory_per_child,
        max_result_bytes=settings.max_result_bytes,
        max_frame_bytes=settings.max_frame_bytes,
        imports=tuple(settings.child_imports),
        default_soft_timeout=settings.default_soft_timeout,
        native_threads=settings.native_threads,
        output_capture=settings.output_capture,
    )
    # Anything buffered now would be written twice: once by us, once by the child.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    try:
        pid = oscalls.fork()
    except OSError:
        for fd in (down_r, down_w, up_r, up_w):
            oscalls.close(fd)
        raise
    if pid == 0:
        try:
            entry(config)
        finally:
            os._exit(CHILD_BOOT_ERROR)
    oscalls.close(down_r)
    oscalls.close(up_w)
    # The child calls setpgrp itself; doing it here too closes the window in which the
    # parent might signal a group that does not exist yet.
    oscalls.setpgid(pid, pid)
    oscalls.set_blocking(up_r, False)
    oscalls.set_blocking(down_w, False)
    return Forked(pid, up_r, down_w)
