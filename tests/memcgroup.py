"""A memory cgroup made by a test (cgroup v1, as root): a real container limit for a
``supervisor run`` started inside it, without a container runtime.

``memory_cgroup(limit)`` makes a uniquely named cgroup under ``/sys/fs/cgroup/memory``,
skips the test with the reason when that cannot be done (not root, no writable v1
memory controller), and removes it afterwards. ``Cgroup.wrapper`` is the command prefix
that moves the process into the cgroup and then execs the real command, so the
supervisor, its children and everything they start are charged to it.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

V1_MEMORY = Path("/sys/fs/cgroup/memory")


@dataclass(frozen=True)
class Cgroup:
    """One test's memory cgroup."""

    path: Path

    @property
    def wrapper(self) -> tuple[str, ...]:
        """``sh -c 'echo $$ > cgroup.procs; exec "$@"' sh``: the command that follows
        runs inside the cgroup, under the same pid."""
        procs = self.path / "cgroup.procs"
        return ("sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh")

    def set_limit(self, limit: int) -> None:
        """Write ``memory.limit_in_bytes``."""
        (self.path / "memory.limit_in_bytes").write_text(str(limit))

    def oom_kills(self) -> int:
        """The kernel's OOM kills in this cgroup so far."""
        for line in (self.path / "memory.oom_control").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill":
                return int(value)
        raise AssertionError("memory.oom_control has no oom_kill line on this kernel")

    def pids(self) -> list[int]:
        """The processes in the cgroup now."""
        return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]


@contextmanager
def memory_cgroup(limit: int) -> Iterator[Cgroup]:
    """A fresh v1 memory cgroup limited to ``limit`` bytes (no swap is charged here:
    the machine has none, and ``memory.memsw`` is left as it is); skips the test when
    one cannot be made. Whatever is left in it at the end is killed."""
    if os.geteuid() != 0:
        pytest.skip("a memory cgroup of its own needs root")
    if not (V1_MEMORY / "memory.limit_in_bytes").exists() or not os.access(V1_MEMORY, os.W_OK):
        pytest.skip("no writable cgroup v1 memory controller at /sys/fs/cgroup/memory")
    path = V1_MEMORY / f"supervisor-test-{uuid.uuid4().hex[:12]}"
    try:
        path.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a memory cgroup: {exc}")
    cgroup = Cgroup(path)
    try:
        cgroup.set_limit(limit)
        if (path / "memory.oom_control").exists():
            cgroup.oom_kills()  # this kernel says how many the OOM killer took
        yield cgroup
    finally:
        _empty(cgroup)
        path.rmdir()


def _empty(cgroup: Cgroup) -> None:
    deadline = time.monotonic() + 10
    while True:
        pids = cgroup.pids()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise AssertionError(f"processes {pids} stay in {cgroup.path}")
        time.sleep(0.05)
