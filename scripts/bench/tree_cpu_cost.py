"""What counting a job's whole process tree costs the child (issue 47), per job.

Times ``UsageMeter.start()`` + ``stop()`` in this process (the child's meter) with no
descendant (a job that starts no process: two ``waitid`` calls more than before) and
with 2 and 8 live descendants (a pool kept across jobs: ``/proc`` read at both ends),
against the two ``getrusage`` calls the meter made before. Medians of ``--rounds``
rounds of ``--jobs`` jobs each, in microseconds.

With ``--against REV``, also the meter of that commit (``git show REV:workers/usage.py``),
interleaved with this one's, round by round.

Usage: python scripts/bench/tree_cpu_cost.py [--jobs 2000] [--rounds 5] [--against REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from workers.usage import UsageMeter  # noqa: E402


def _sleep_forever() -> None:
    time.sleep(3600)


def _per_job(jobs: int, rounds: int, body) -> float:
    results = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(jobs):
            body()
        results.append((time.perf_counter() - start) / jobs * 1e6)
    return statistics.median(results)


def _old_meter(rev: str) -> type:
    source = subprocess.run(["git", "show", f"{rev}:workers/usage.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("old_usage", f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.UsageMeter


def _side_by_side(jobs: int, rounds: int, old: type) -> None:
    mine, theirs = UsageMeter(print), old(print)
    results: dict[str, list[float]] = {"this": [], "old": []}
    for n in range(rounds * 2):
        name, meter = (("this", mine), ("old", theirs))[n % 2]
        start = time.perf_counter()
        for _ in range(jobs):
            meter.start()
            meter.stop()
        results[name].append((time.perf_counter() - start) / jobs * 1e6)
    this, before = statistics.median(results["this"]), statistics.median(results["old"])
    print(f"start + stop, no descendant, side by side: this {this:.1f} us, "
          f"old {before:.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", metavar="REV")
    args = parser.parse_args()
    if args.against:
        _side_by_side(args.jobs, args.rounds, _old_meter(args.against))
    meter = UsageMeter(print)

    def before() -> None:
        resource.getrusage(resource.RUSAGE_SELF)
        resource.getrusage(resource.RUSAGE_CHILDREN)

    def now() -> None:
        meter.start()
        meter.stop()

    print(f"two getrusage calls (the meter's CPU read before): "
          f"{_per_job(args.jobs, args.rounds, before):.1f} us")
    print(f"start + stop, no descendant: {_per_job(args.jobs, args.rounds, now):.1f} us")
    ctx = multiprocessing.get_context("fork")
    kept: list = []
    for size in (2, 8):
        while len(kept) < size:
            proc = ctx.Process(target=_sleep_forever, daemon=True)
            proc.start()
            kept.append(proc)
        cost = _per_job(max(args.jobs // 10, 10), args.rounds, now)
        print(f"start + stop, {size} live descendants: {cost:.1f} us")
    for proc in kept:
        proc.kill()
        proc.join()


if __name__ == "__main__":
    main()
