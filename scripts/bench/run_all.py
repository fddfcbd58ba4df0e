"""Run every benchmark on this machine and write docs/benchmarks.md.

One entry point for issue 6: enqueue rates and the store against a hand-written SQL
loop, the pool against raw pipes, ``supervisor run`` throughput with 1, 2 and 4 children
against those ceilings, CPU-bound work against multiprocessing.Pool, pickup latency,
RSS over a long run, several supervisors on one database, and the same jobs through
procrastinate and PgQueuer (installed into their own virtualenvs by ``peers``).

Usage: python scripts/bench/run_all.py [--quick] [--skip peers,rss] [--out docs/benchmarks.md]

``--quick`` shrinks every size for a smoke run (minutes, not an hour); the numbers it
writes are then not the published ones.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_enqueue
import bench_run
import common
import efficiency
import latency
import multi
import rescue
import rss

KEEP_MARKER = "<!-- everything below is kept when run_all.py rewrites the tables -->"
SECTIONS = ("enqueue", "run", "efficiency", "latency", "rss", "multi", "rescue", "peers")


def section_enqueue(dsn: str, quick: bool, runs: int) -> list[tuple[str, str]]:
    options = SimpleNamespace(jobs=5_000 if quick else 20_000,
                              single=500 if quick else 2_000, runs=runs)
    name = "supervisor_bench_enqueue"
    db = common.scratch_database(dsn, name)
    try:
        rows = bench_enqueue.run(db, options)
    finally:
        common.drop_database(dsn, name)
    return [(label, f"{value} jobs/s") for label, value in rows]


def section_run(dsn: str, quick: bool, runs: int) -> list[tuple[str, str]]:
    return bench_run.run(dsn, jobs=5_000 if quick else 20_000, runs=runs,
                         children=(2,) if quick else (1, 2, 4), prefetch=(1, 64),
                         cpu_jobs=20 if quick else 200)


def section_efficiency(dsn: str, quick: bool, runs: int) -> list[tuple[str, str]]:
    return efficiency.run(dsn, runs=runs, cpu_seconds=2.0 if quick else 10.0,
                          noop_jobs=5_000 if quick else 20_000)


def section_latency(dsn: str, quick: bool, runs: int) -> list[tuple[str, str]]:
    return latency.run(dsn, probes=100 if quick else 500)


def section_rss(dsn: str, quick: bool, runs: int) -> list[tuple[str, str]]:
    return rss.run(dsn, jobs=50_000 if quick else 1_000_000)


def section_multi(dsn: str, quick: bool, runs: int) -> list[tuple[str, str]]:
    return multi.run(dsn, jobs=5_000 if quick else 20_000, runs=runs)


def section_rescue(dsn: str, quick: bool, runs: int) -> list[tuple[str, str]]:
    return rescue.run(dsn, lease_ttl=5.0 if quick else 30.0)


def section_peers(dsn: str, quick: bool, runs: int) -> list[tuple[str, str]]:
    import peers

    return peers.run(dsn, jobs=5_000 if quick else 20_000, runs=runs)


TITLES = {
    "enqueue": "Enqueue, and the store against a hand-written SQL loop",
    "run": "`supervisor run` throughput against its ceilings; CPU-bound work",
    "efficiency": "CPU efficiency with default settings, against multiprocessing.Pool",
    "latency": "Pickup latency (enqueue commit to handler start)",
    "rss": "Memory over a long run",
    "multi": "Several supervisors on one database",
    "rescue": "Rescue after a supervisor is killed",
    "peers": "Peers on the same PostgreSQL: the same no-op jobs",
}
COMMANDS = {
    "enqueue": "python scripts/bench_enqueue.py",
    "run": "python scripts/bench_run.py --children 1 2 4",
    "efficiency": "python scripts/bench/efficiency.py",
    "latency": "python scripts/bench/latency.py",
    "rss": "python scripts/bench/rss.py --jobs 1000000",
    "multi": "python scripts/bench/multi.py",
    "rescue": "python scripts/bench/rescue.py",
    "peers": "python scripts/bench/peers.py",
}


def render(machine: dict[str, str], results: dict[str, list[tuple[str, str]]],
           seconds: dict[str, float], runs: int, quick: bool) -> str:
    lines = ["# Benchmarks", "",
             "Written by `python scripts/bench/run_all.py` "
             f"({'--quick: smoke sizes, not the published figures' if quick else 'full run'}"
             f"; medians of {runs} runs where a figure is a rate).", "",
             "| machine | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in machine.items()]
    lines.append(f"| date | {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} |")
    for name, rows in results.items():
        lines += ["", f"## {TITLES[name]}", "",
                  f"Command: `{COMMANDS[name]}` ({seconds[name]:.0f} s)", "",
                  "| measurement | result |", "|---|---|"]
        lines += [f"| {label} | {value} |" for label, value in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip", default="", help="comma-separated sections to leave out")
    parser.add_argument("--out", default=str(common.ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    skip = {s for s in args.skip.split(",") if s}
    runs = 1 if args.quick else args.runs
    machine = common.machine(args.dsn)
    results, seconds = {}, {}
    for name in SECTIONS:
        if name in skip:
            continue
        print(f"== {name}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        results[name] = globals()[f"section_{name}"](args.dsn, args.quick, runs)
        seconds[name] = time.monotonic() - t0
        for label, value in results[name]:
            print(f"   {label}: {value}", file=sys.stderr, flush=True)
    text = render(machine, results, seconds, runs, args.quick)
    out = Path(args.out)
    # Hand-written analysis below the marker survives a new run.
    kept = out.read_text().partition(KEEP_MARKER)[2] if out.exists() else ""
    out.write_text(text + ("\n" + KEEP_MARKER + kept if kept else ""))
    print(f"wrote {os.path.relpath(args.out)}", file=sys.stderr)


if __name__ == "__main__":
    main()
