"""What the parent pays per memory sample (issues 45 and 51): a busy child's RSS summed
over its process tree (``OsCalls.rss``) against its own ``statm`` alone (the pool's
read before issue 45 used a buffered ``open``: about 30 us), and one read of
the container's usage and OOM kill count (``shared.memlimit.ContainerMemory``), on a
cgroup v1 made here when root, else on fake v2 files.

Usage: python scripts/bench/memory_sampling.py [--rounds 2000]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shared.memlimit import ContainerMemory
from shared.procfs import descendants, rss
from supervisor.pool.oscalls import OsCalls


def per_call(fn, rounds: int) -> float:
    """Microseconds per call, the best of three runs of ``rounds`` calls."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(rounds):
            fn()
        best = min(best, (time.perf_counter() - t0) / rounds)
    return best * 1e6


def tree_of(descendants: int) -> subprocess.Popen:
    """A process with ``descendants`` children (sleepers), like a child with a pool."""
    code = ("import subprocess, sys, time; "
            f"ps = [subprocess.Popen(['sleep', '60']) for _ in range({descendants})]; "
            "print('ready', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def container() -> tuple[ContainerMemory, str, Path | None]:
    v1 = Path("/sys/fs/cgroup/memory")
    if os.geteuid() == 0 and os.access(v1, os.W_OK):
        path = v1 / f"bench-{uuid.uuid4().hex[:8]}"
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(1 << 30))
        return ContainerMemory(path, 1, 1 << 30), "cgroup v1 (real)", path
    root = Path(tempfile.mkdtemp())
    (root / "memory.current").write_text("104857600\n")
    (root / "memory.stat").write_text("anon 1\ninactive_file 0\n")
    (root / "memory.events").write_text("oom 0\noom_kill 0\n")
    return ContainerMemory(root, 2, 1 << 30), "cgroup v2 files (fake, tmpfs)", None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    rounds = parser.parse_args().rounds
    oscalls = OsCalls()
    for n in (0, 2, 8):
        proc = tree_of(n)
        try:
            pid = proc.pid
            own = per_call(partial(rss, pid), rounds)
            tree = per_call(partial(oscalls.rss, pid), rounds)
            print(f"RSS of a process with {n} descendants: own statm {own:.1f} us, "
                  f"whole tree {tree:.1f} us")
        finally:
            for pid in descendants(proc.pid):
                os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait()
    memory, where, made = container()
    try:
        print(f"container usage ({where}): {per_call(memory.usage, rounds):.1f} us; "
              f"OOM kill count: {per_call(memory.oom_kills, rounds):.1f} us")
    finally:
        if made is not None:
            made.rmdir()


if __name__ == "__main__":
    main()
