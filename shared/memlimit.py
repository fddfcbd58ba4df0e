"""How much memory this process's container may use: the cgroup's limit (v2
``memory.max``, v1 ``memory.limit_in_bytes``), the tightest of its own cgroup and its
ancestors, read under the same injectable cgroup root as ``shared.cpus``
(``SUPERVISOR_CGROUP_ROOT``, tests use a fake). None outside a container."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from shared.cpus import CGROUP_ROOT_ENV, DEFAULT_CGROUP_ROOT, own_cgroups, up_to

# v1 writes "no limit" as a huge number (the largest page-aligned int64).
_V1_UNLIMITED = 1 << 60


@dataclass(frozen=True)
class MemoryLimit:
    """The container's memory limit in bytes and the file that set it."""

    bytes: int
    source: str


def cgroup_memory_limit(cgroup_root: str | None = None) -> MemoryLimit | None:
    """The tightest memory limit of this process's cgroup and its ancestors, or None."""
    root = Path(cgroup_root or os.environ.get(CGROUP_ROOT_ENV) or DEFAULT_CGROUP_ROOT)
    v2_path, v1_path = own_cgroups("memory")
    best: MemoryLimit | None = None
    candidates = [d / "memory.max" for d in up_to(root, v2_path)]
    candidates += [d / "memory.limit_in_bytes" for d in up_to(root / "memory", v1_path)]
    for path in candidates:
        value = _read_limit(path)
        if value is not None and (best is None or value < best.bytes):
            best = MemoryLimit(value, f"cgroup {path.name} {value}")
    return best


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
