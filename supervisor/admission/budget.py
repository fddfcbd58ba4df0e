"""A supervisor's budget: CPUs (its children, ``-n``) and memory (``memory_budget``, or
the container's ``memory.max`` less the parent's own RSS and a margin, or none outside a
container), and the container itself when there is one: its usage is the budget's ground
truth beside the reservations (issue 51)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from shared.memlimit import ContainerMemory, container_memory, headroom
from shared.units import format_size

MIN_MEMORY_BUDGET = 64 << 20  # below this a budget is a size written without its unit


@dataclass(frozen=True)
class Budget:
    """What the jobs running here may reserve together: ``cpus`` (children's worth) and
    ``memory`` in bytes (None: no memory admission); ``source`` says where it came
    from, for the start-up line and ``status``."""

    cpus: int
    memory: int | None
    source: str
    # Counted resources this supervisor has (``--resources gpu=2``): none unless declared.
    resources: Mapping[str, int] = field(default_factory=dict)
    # The cgroup whose memory limit binds the supervisor (None: none), read for its usage.
    container: ContainerMemory | None = None

    def describe(self) -> str:
        """The budget in words."""
        memory = "no memory admission" if self.memory is None else format_size(self.memory)
        counted = "".join(f", {name}={n}" for name, n in sorted(self.resources.items()))
        return f"{self.cpus} CPUs, {memory}{counted} ({self.source})"

    @property
    def ceiling(self) -> int | None:
        """The container's usage past which nothing more starts: its limit less the
        headroom the pool's guard keeps (None: no container limit)."""
        container = self.container
        return None if container is None else container.limit - headroom(container.limit)


def make_budget(children: int, memory_budget: int | None,
                cgroup_root: str | None = None, parent_rss: int | None = None,
                resources: Mapping[str, int] | None = None) -> Budget:
    """The budget of a supervisor of ``children`` children: ``memory_budget`` when set,
    else the cgroup's memory limit less ``parent_rss`` (read from /proc when None) and
    ``max(64 MiB, 5%)``, else no memory admission; and the counted ``resources`` it
    declares."""
    counted = dict(resources or {})
    container = container_memory(cgroup_root)
    if memory_budget is not None:
        return Budget(children, memory_budget, "memory_budget", counted, container)
    if container is None:
        return Budget(children, None, "no memory_budget and no cgroup memory limit", counted)
    rss = own_rss() if parent_rss is None else parent_rss
    margin = headroom(container.limit)
    memory = max(0, container.limit - rss - margin)
    return Budget(children, memory,
                  f"{container.source} less the parent's RSS {format_size(rss)} and a "
                  f"{format_size(margin)} margin", counted, container)


def own_rss() -> int:
    """This process's resident set in bytes (0 when /proc cannot say)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")
