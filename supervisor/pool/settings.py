"""How the pool runs its children: one settings record, fixed when the pool is built.

The defaults here are the pool's own; ``supervisor.config`` fills the record from the
command line and config file.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from shared import defaults
from shared.memlimit import ContainerMemory


@dataclass
class PoolSettings:
    """How the pool runs its children. Times are seconds, sizes bytes."""

    size: int
    boot_timeout: float = defaults.BOOT_TIMEOUT  # READY within this or SIGKILL
    heartbeat_interval: float = defaults.HEARTBEAT_INTERVAL  # a busy child beats this often
    heartbeat_timeout: float = defaults.HEARTBEAT_TIMEOUT  # silence past this while busy: hung
    kill_grace: float = defaults.KILL_GRACE  # SIGTERM to the group, then SIGKILL after this
    max_jobs_per_child: int | None = None
    max_jobs_jitter: float = 0.1  # each child's limit drawn in [n*(1-j), n*(1+j)]
    max_memory_per_child: int | None = None  # RSS cap: sampled by the parent while busy
    memory_sample: float = 0.25  # seconds between RSS samples of a busy child
    # Sample busy children's RSS without a cap too (a memory budget applies, or
    # ``container``): kills by the kernel and by the container guard then say what the
    # job held, and each attempt's max_rss_bytes counts its whole process tree.
    watch_memory: bool = False
    # The cgroup whose memory limit binds the supervisor (None: none): the pool reads
    # its usage (``supervisor.pool.pressure``) and its OOM kills.
    container: ContainerMemory | None = None
    max_result_bytes: int = defaults.MAX_RESULT_BYTES
    max_frame_bytes: int = defaults.MAX_FRAME_BYTES
    crash_loop_limit: int = 5  # boot failures in a row, or within the window, halt
    crash_loop_window: float = 60.0
    child_imports: tuple[str, ...] = ()  # modules each child imports after boot
    default_soft_timeout: float | None = None  # SoftTimeout for kinds whose @job sets none
    native_threads: int | None = None  # each child's BLAS/OpenMP/numexpr pools; None: as is
    output_capture: int = defaults.OUTPUT_CAPTURE  # bytes of each attempt's output kept

    @property
    def samples_memory(self) -> bool:
        """Whether the parent samples each busy child's RSS (a cap, or ``watch_memory``)."""
        return (bool(self.max_memory_per_child) or self.watch_memory
                or self.container is not None)

    def memory_sample_interval(self) -> float:
        """How often the parent samples a busy child's RSS when a memory limit is set:
        often enough that a fast allocator cannot run far past the cap, and one read of
        ``/proc/<pid>/statm`` (microseconds) each time."""
        return max(0.01, self.memory_sample)

    def cpu_probe(self, beat_timeout: float) -> float:
        """How often the parent reads a silent child's CPU time once its heartbeat
        deadline has passed: a handler that holds the GIL in native code starves the
        heartbeat but keeps its CPU time moving. Short enough that a child which uses
        no CPU either is judged hung within a second of its deadline."""
        return max(0.01, min(0.5, beat_timeout / 4))

    def draw_max_jobs(self, rng: random.Random) -> int | None:
        """One child's job limit, jittered so that children do not all recycle in the
        same moment."""
        n = self.max_jobs_per_child
        if n is None:
            return None
        j = max(0.0, min(self.max_jobs_jitter, 1.0))
        return max(1, round(rng.uniform(n * (1 - j), n * (1 + j))))
