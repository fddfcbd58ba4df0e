"""What one child costs per job, alone (issues 43 and 48): no database, no engine, just
the child runtime fed over its pipes as the pool feeds it.

A child is forked the way the pool forks one (``supervisor.pool.spawn.fork_child``,
``workers.child.child_main``), and this process plays the parent: it keeps ``--depth``
RUN frames queued in the child's pipe and sends the next one as each answer arrives.
After ``--warmup`` jobs it reads the child's CPU time from ``/proc`` (its main thread
and its other threads, the heartbeat's, apart), runs ``--jobs`` more, and reads it
again. Jobs sleep ``--ms`` ms (0: return at once), so whatever CPU the child uses is
the runtime's own: frames, the usage meter, the result's encoding, the heartbeat
thread's looks, the title.

Several children at once (``--children``) share the CPUs as they would under ``-n N``;
each is fed and measured the same way, and the report gives their sum per job.

Usage: python scripts/bench/child_loop.py [--ms 20] [--jobs 2000] [--children 1]
       [--depth 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shared import wire
from shared.frames import FrameReader
from supervisor.pool.oscalls import OsCalls
from supervisor.pool.settings import PoolSettings
from supervisor.pool.spawn import fork_child
from workers import job
from workers.child import child_main

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@job(queue="child_loop")
def child_loop_sleep(seconds: float) -> dict:
    """Sleeps ``seconds`` (none at 0) and returns a small result with a null in it, as
    many real results have."""
    if seconds:
        time.sleep(seconds)
    return {"slept": seconds, "note": None}


@dataclass
class Fed:
    """One child being fed: its pipes, what is queued, what came back."""

    pid: int
    read_fd: int
    write_fd: int
    reader: FrameReader
    queued: int = 0
    done: int = 0
    ready: bool = False


def thread_ticks(pid: int) -> tuple[int, int]:
    """(main thread, other threads) CPU ticks of ``pid`` so far."""
    main = other = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        if int(tid) == pid:
            main += ticks
        else:
            other += ticks
    return main, other


def run_round(children: int, ms: float, warmup: int, jobs: int, depth: int
              ) -> tuple[float, float, float]:
    """Feed ``children`` children ``warmup + jobs`` jobs each; return (main-thread CPU
    per job, other threads' CPU per job, jobs/s) over the measured jobs, in ms."""
    settings = PoolSettings(size=children)
    oscalls = OsCalls()
    fed: dict[int, Fed] = {}
    for n in range(children):
        forked = fork_child(oscalls, settings, worker_no=n + 1, max_jobs=None,
                            parent_pid=os.getpid(), entry=child_main)
        os.set_blocking(forked.write_fd, True)
        fed[forked.read_fd] = Fed(forked.pid, forked.read_fd, forked.write_fd, FrameReader())
    args = f'{{"seconds": {ms / 1000}}}'
    next_id = [1]

    def send(child: Fed) -> None:
        frame = wire.Run.pack(next_id[0], "child_loop_sleep", "child_loop", 1, 1, args)
        next_id[0] += 1
        os.write(child.write_fd, frame)
        child.queued += 1

    total = warmup + jobs
    marks: dict[int, tuple[int, int]] = {}
    began = 0.0
    try:
        while any(c.done < total for c in fed.values()):
            readable, _, _ = select.select(list(fed), [], [], 10.0)
            if not readable:
                raise SystemExit("a child stopped answering")
            for fd in readable:
                child = fed[fd]
                data = os.read(fd, 65536)
                if not data:
                    raise SystemExit(f"child {child.pid} exited")
                for frame in child.reader.feed(data):
                    if frame.type == wire.READY:
                        child.ready = True
                    elif frame.type in (wire.DONE, wire.FAILED):
                        if frame.type == wire.FAILED:
                            raise SystemExit(f"a job failed: {wire.decode(frame)}")
                        child.queued -= 1
                        child.done += 1
                        if child.done == warmup:
                            marks[child.pid] = thread_ticks(child.pid)
                            if len(marks) == children:
                                began = time.perf_counter()
                if child.ready:
                    while child.queued < depth and child.done + child.queued < total:
                        send(child)
        elapsed = time.perf_counter() - began
        main = other = 0
        for child in fed.values():
            now = thread_ticks(child.pid)
            main += now[0] - marks[child.pid][0]
            other += now[1] - marks[child.pid][1]
    finally:
        for child in fed.values():
            os.write(child.write_fd, wire.Stop().encode())
        for child in fed.values():
            try:
                os.waitpid(child.pid, 0)
            except ChildProcessError:
                pass
            os.close(child.read_fd)
            os.close(child.write_fd)
    per_job = 1000 / CLOCK_TICKS / (jobs * children)
    return main * per_job, other * per_job, jobs * children / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", type=float, default=20.0)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--children", type=int, default=1)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    rows = [run_round(args.children, args.ms, args.warmup, args.jobs, args.depth)
            for _ in range(args.rounds)]
    med = statistics.median
    print(f"| {args.ms:g} ms jobs, {args.children} child(ren), depth {args.depth} "
          f"| main thread {med(r[0] for r in rows):.3f} ms/job "
          f"({', '.join(f'{r[0]:.3f}' for r in rows)}) "
          f"| other threads {med(r[1] for r in rows):.3f} ms/job "
          f"| {med(r[2] for r in rows):,.0f} jobs/s |")


if __name__ == "__main__":
    main()
