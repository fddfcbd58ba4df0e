"""Waiting for a file descriptor to be readable, with ``poll``: ``select`` refuses any fd
past 1,024 (``ValueError``), and the processes this runs in have them: a supervisor of
hundreds of children, a web worker holding many sockets that enqueues jobs. Before this,
a producer's pooled connection on such an fd was judged dead at every call (each call
reconnected), and ``wait`` looped without sleeping."""

from __future__ import annotations

import select
from collections.abc import Iterable


def readable(fds: Iterable[int], seconds: float) -> bool:
    """Whether one of ``fds`` is readable within ``seconds`` (0: a look, no wait). A
    closed or broken fd counts as readable: reading it is what tells."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(seconds, 0.0) * 1000))
