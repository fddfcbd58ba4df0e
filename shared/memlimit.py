"""How much memory this process's container may use and uses now: the cgroup's limit
(v2 ``memory.max``, v1 ``memory.limit_in_bytes``), the tightest of its own cgroup and its
ancestors, its usage (v2 ``memory.current``, v1 ``memory.usage_in_bytes``, less the
page cache the kernel reclaims before it kills anything) and how many times the
kernel's OOM killer struck in it (v2 ``memory.events``, v1 ``memory.oom_control``: the
``oom_kill`` line). Read under the same injectable cgroup root as ``shared.cpus``
(``SUPERVISOR_CGROUP_ROOT``, tests use a fake). None outside a container."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from shared.cpus import CGROUP_ROOT_ENV, DEFAULT_CGROUP_ROOT, own_cgroups, up_to

# v1 writes "no limit" as a huge number (the largest page-aligned int64).
_V1_UNLIMITED = 1 << 60
# Kept free of a container's limit: page cache, the children's own interpreters before
# they run anything, the kernel's slack. Admission starts nothing past the limit less
# this; the pool's guard stops the youngest job there (``supervisor.pool.pressure``).
HEADROOM_MIN = 64 << 20
HEADROOM_SHARE = 0.05


def headroom(limit: int) -> int:
    """What is kept free of a container's ``limit``: 64 MiB or 5%, the larger."""
    return max(HEADROOM_MIN, int(limit * HEADROOM_SHARE))


@dataclass(frozen=True)
class MemoryLimit:
    """The container's memory limit in bytes and the file that set it."""

    bytes: int
    source: str


@dataclass(frozen=True)
class ContainerMemory:
    """The cgroup whose memory limit binds this process (the tightest of its own and its
    ancestors'): where to read its usage and its OOM kills. ``version`` is 1 or 2."""

    directory: Path
    version: int
    limit: int

    @property
    def source(self) -> str:
        """The limit in words, naming its file (for the start-up line and ``status``)."""
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        return f"cgroup {name} {self.limit}"

    def usage(self) -> int | None:
        """Bytes charged to the cgroup now, less its page cache (the file LRU lists,
        active and inactive: what the kernel reclaims before it kills anything; tmpfs
        and shared memory stay counted, they live on the anon lists); None if the cgroup
        cannot be read. A job reading many files fills the cache, not this."""
        current = _read_int(self.directory / ("memory.current" if self.version == 2
                                              else "memory.usage_in_bytes"))
        if current is None:
            return None
        prefix = b"" if self.version == 2 else b"total_"
        cache = _stat_lines(self.directory / "memory.stat",
                            (prefix + b"active_file", prefix + b"inactive_file"))
        return max(0, current - sum(cache))

    def oom_kills(self) -> int | None:
        """How many processes the kernel's OOM killer has killed in this cgroup so far
        (None: this kernel does not say)."""
        if self.version == 2:
            return _stat_line(self.directory / "memory.events", b"oom_kill")
        return _stat_line(self.directory / "memory.oom_control", b"oom_kill")


def container_memory(cgroup_root: str | None = None) -> ContainerMemory | None:
    """The cgroup with the tightest memory limit among this process's cgroup and its
    ancestors (v2, then v1), or None when none sets one."""
    root = Path(cgroup_root or os.environ.get(CGROUP_ROOT_ENV) or DEFAULT_CGROUP_ROOT)
    v2_path, v1_path = own_cgroups("memory")
    best: ContainerMemory | None = None
    candidates = [(d, 2, "memory.max") for d in up_to(root, v2_path)]
    candidates += [(d, 1, "memory.limit_in_bytes") for d in up_to(root / "memory", v1_path)]
    for directory, version, name in candidates:
        value = _read_limit(directory / name)
        if value is not None and (best is None or value < best.limit):
            best = ContainerMemory(directory, version, value)
    return best


def cgroup_memory_limit(cgroup_root: str | None = None) -> MemoryLimit | None:
    """The tightest memory limit of this process's cgroup and its ancestors, or None."""
    found = container_memory(cgroup_root)
    return None if found is None else MemoryLimit(found.limit, found.source)


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 < value < _V1_UNLIMITED else None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_bytes())
    except (OSError, ValueError):
        return None


def _stat_lines(path: Path, keys: tuple[bytes, ...]) -> list[int]:
    """The numbers after ``keys`` in a ``key value`` per line file (those found)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    found = []
    for line in data.splitlines():
        name, _, value = line.partition(b" ")
        if name in keys:
            try:
                found.append(int(value))
            except ValueError:
                pass
    return found


def _stat_line(path: Path, key: bytes) -> int | None:
    """The number after ``key`` in a ``key value`` per line file (memory.stat,
    memory.events, memory.oom_control), or None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    for line in data.splitlines():
        name, _, value = line.partition(b" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                return None
    return None
