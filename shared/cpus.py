"""How many CPUs this process may use: the container's limit, not the host's count.

A container limited to 2 CPUs on a 64-core host sees 64 in ``os.cpu_count()``. The
limit lives in the cgroup (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` over
``cpu.cfs_period_us``) and in the CPU affinity mask (``taskset``, ``cpuset``); the
smallest of them is what the process may really use. The cgroup filesystem's root is
``/sys/fs/cgroup`` unless ``SUPERVISOR_CGROUP_ROOT`` names another (tests use a fake).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT_ENV = "SUPERVISOR_CGROUP_ROOT"
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"


@dataclass(frozen=True)
class CpuCount:
    """How many CPUs may be used (``count``, at least 1) and where that came from
    (``source``, in words, for the start-up line)."""

    count: int
    source: str


def available_cpus(cgroup_root: str | None = None) -> CpuCount:
    """The CPUs this process may use: the least of the cgroup's CPU quota (rounded
    up), the affinity mask and the host's count."""
    host = os.cpu_count() or 1
    found = [CpuCount(host, "host")]
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = host
    if affinity < host:
        found.append(CpuCount(affinity, f"sched_getaffinity, {affinity} of {host}"))
    quota = cgroup_quota(cgroup_root or os.environ.get(CGROUP_ROOT_ENV) or DEFAULT_CGROUP_ROOT)
    if quota is not None:
        found.append(quota)
    return min(found, key=lambda c: c.count)


def cgroup_quota(root: str) -> CpuCount | None:
    """The CPU quota of this process's cgroup (or of the nearest ancestor that sets
    one, the tightest of them), as whole CPUs; None if none is set or readable."""
    best: CpuCount | None = None
    for quota_file, period_file, read in _quota_files(Path(root)):
        value = read(quota_file, period_file)
        if value is None:
            continue
        quota, period = value
        count = max(1, math.ceil(quota / period))
        if best is None or count < best.count:
            best = CpuCount(count, f"cgroup {quota_file.name} {quota} {period}")
    return best


def _quota_files(root: Path):
    """(quota file, period file, reader) for this process's cgroup and its ancestors
    under ``root``, v2 then v1."""
    v2_path, v1_path = own_cgroups("cpu")
    for directory in up_to(root, v2_path):
        yield directory / "cpu.max", None, _read_cpu_max
    for base in (root / "cpu", root / "cpu,cpuacct"):
        for directory in up_to(base, v1_path):
            yield directory / "cpu.cfs_quota_us", directory / "cpu.cfs_period_us", _read_v1


def own_cgroups(controller: str) -> tuple[str, str]:
    """This process's cgroup path in the v2 hierarchy and in v1's ``controller``
    (``cpu``, ``memory``; ``/`` when unknown)."""
    v2 = v1 = "/"
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return v2, v1
    for line in lines:
        _id, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if controllers == "":
            v2 = path or "/"
        elif controller in controllers.split(","):
            v1 = path or "/"
    return v2, v1


def up_to(base: Path, path: str) -> list[Path]:
    """``base/path`` and each of its ancestors up to ``base``, those that exist."""
    parts = [p for p in path.strip("/").split("/") if p and p != ".."]
    dirs = [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]
    return [d for d in dirs if d.is_dir()]


def _read_cpu_max(quota_file: Path, _period: Path | None) -> tuple[int, int] | None:
    try:
        quota, _, period = quota_file.read_text().strip().partition(" ")
        if quota == "max":
            return None
        return int(quota), int(period or 100000)
    except (OSError, ValueError):
        return None


def _read_v1(quota_file: Path, period_file: Path | None) -> tuple[int, int] | None:
    try:
        quota = int(quota_file.read_text().strip())
        period = int(period_file.read_text().strip()) if period_file else 100000
    except (OSError, ValueError):
        return None
    if quota <= 0 or period <= 0:  # -1: no quota
        return None
    return quota, period
