"""Whether ``/dev/shm`` is near full, for ``supervisor status`` (issue 47).

Process pools (joblib's loky, ``multiprocessing``, torch) keep semaphores, segments and
memmapped arrays there; a container's is 64 MB by default, and once it is full they
fail with ``No space left on device`` or a bus error. The children remove what their
jobs' processes left (``workers.shm``); this warns about what fills it anyway: large
arrays in flight, other programs, or leftovers of children that were killed.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from shared.units import format_size

SHM_DIR = "/dev/shm"
NEAR_FULL = 0.8  # used share from which status warns


class ShmSpace(NamedTuple):
    """How much of a tmpfs is used: bytes in all and bytes in use."""

    total: int
    used: int

    @property
    def share(self) -> float:
        """Used share from 0 to 1 (0 for an empty size)."""
        return self.used / self.total if self.total else 0.0


def shm_space(directory: str = SHM_DIR) -> ShmSpace | None:
    """The size and use of ``directory``'s file system, or None if it cannot be read."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    total = st.f_blocks * st.f_frsize
    return ShmSpace(total, total - st.f_bfree * st.f_frsize)


def shm_warning(directory: str = SHM_DIR, near: float | None = None) -> str | None:
    """The line ``supervisor status`` prints when ``directory`` (this machine's, where
    status runs) is at least ``near`` (``NEAR_FULL``) full; None otherwise or when it
    cannot be read."""
    if near is None:
        near = NEAR_FULL
    space = shm_space(directory)
    if space is None or space.total == 0 or space.share < near:
        return None
    return (f"warning: {directory} on this machine is {space.share:.0%} full "
            f"({format_size(space.used)} of {format_size(space.total)}); process pools "
            "fail when it fills (see docs/cpu-heavy.md, \"/dev/shm\")")
