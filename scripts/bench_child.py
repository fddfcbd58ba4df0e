"""What the child's guards cost: how soon ``ps`` shows a job, what an idle child burns,
and the per-job checks on the job's path.

    python scripts/bench_child.py [--jobs 40] [--idle 5]

- Title lag: a pool of one child with the default heartbeat interval (2 s) runs
  ``--jobs`` jobs that sleep 0.3 s; for each, the parent polls the child's
  /proc/<pid>/cmdline every 0.2 ms from dispatch until it names the job (or the job
  ends first: a miss).
- Idle CPU: the child's user+system CPU over ``--idle`` seconds with no job.
- Per-job checks: ``JobPipe.intact()`` (two fstat calls) timed in a loop.

Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import selectors
import statistics
import sys
import time
import timeit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from shared.jobs import ClaimedJob
from supervisor.pool import JobDone, Pool, PoolSettings
from workers import job

NAP = 0.3  # each job's length (s)


@job(name="bench_nap")
def bench_nap(seconds: float) -> None:
    time.sleep(seconds)


@job(name="bench_pid")
def bench_pid() -> int:
    return os.getpid()


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def _turn(pool: Pool, sel: selectors.BaseSelector, wait: float) -> list:
    for key, mask in sel.select(wait):
        pool.handle_event(key, mask)
    pool.reap()
    pool.tick()
    return pool.take_outcomes()


def measure(jobs: int, idle: float) -> tuple[list[float], float]:
    """Title lags (s) and the idle child's CPU seconds per second."""
    sel = selectors.DefaultSelector()
    pool = Pool(PoolSettings(size=1), sel)
    pool.start()
    while pool.idle_count() < 1:
        _turn(pool, sel, 0.1)
    pool.dispatch(ClaimedJob(0, "bench_pid", "default", 1, 1, 0, None, "{}"))
    pid = 0
    while not pid:
        for o in _turn(pool, sel, 0.1):
            if isinstance(o, JobDone):
                pid = int(o.result_json)
    lags = []
    for n in range(1, jobs + 1):
        wanted = f" job {n} bench_nap ".encode()
        pool.dispatch(ClaimedJob(n, "bench_nap", "default", 1, 1, 0, None,
                                 f'{{"seconds": {NAP}}}'))
        t0 = time.monotonic()
        while wanted not in _cmdline(pid):
            if time.monotonic() - t0 > NAP:
                lags.append(float("inf"))  # the job ended before ps ever showed it
                break
            time.sleep(0.0002)
        else:
            lags.append(time.monotonic() - t0)
        while not any(isinstance(o, JobDone) for o in _turn(pool, sel, 0.05)):
            pass
    with open(f"/proc/{pid}/stat") as f:
        start = f.read().rsplit(")", 1)[1].split()
    time.sleep(idle)
    with open(f"/proc/{pid}/stat") as f:
        end = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    # utime and stime are fields 14 and 15 of stat; after the ")" they are 12 and 13.
    cpu = (int(end[11]) + int(end[12]) - int(start[11]) - int(start[12])) / tick
    pool.stop()
    while pool.alive():
        _turn(pool, sel, 0.05)
    sel.close()
    return lags, cpu / idle


def intact_cost() -> float:
    """µs per ``JobPipe.intact()`` call on a real pipe."""
    from workers.jobpipe import JobPipe

    r, w = os.pipe()
    pipe = JobPipe(r, w)
    n = 200_000
    seconds = min(timeit.repeat(pipe.intact, number=n, repeat=5))
    os.close(pipe.read_fd)
    os.close(pipe.write_fd)
    return seconds / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--idle", type=float, default=5.0)
    args = parser.parse_args()
    lags, idle_cpu = measure(args.jobs, args.idle)
    missed = sum(1 for lag in lags if lag == float("inf"))
    lags = sorted(lag for lag in lags if lag != float("inf")) or [float("nan")]
    p99 = lags[min(len(lags) - 1, round(0.99 * (len(lags) - 1)))]
    print(f"command: python scripts/bench_child.py --jobs {args.jobs} --idle {args.idle}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    print()
    print("| measure | value |")
    print("|---|---|")
    print(f"| jobs of {NAP} s whose title never showed | {missed} of {args.jobs} |")
    print(f"| title lag after dispatch, median of those shown (ms) | "
          f"{statistics.median(lags) * 1000:.1f} |")
    print(f"| title lag, p99 / max (ms) | {p99 * 1000:.1f} / {lags[-1] * 1000:.1f} |")
    print(f"| idle child CPU (% of a core, over {args.idle:g} s) | {idle_cpu * 100:.2f} |")
    try:
        print(f"| JobPipe.intact() per job (µs, best of 5) | {intact_cost():.2f} |")
    except ImportError:
        print("| JobPipe.intact() per job | (not in this tree) |")


if __name__ == "__main__":
    main()
