"""Start-up: from ``exec`` of ``supervisor run --burst -n 2`` to its first job's first
line, and the parent's CPU time until then, for each checkout given with ``--code``
(rounds alternate between them, each on a database its own code migrated). The
supervisor runs from compiled bytecode (``common.supervisor_env``), as a user's
install does.

The wall time depends on what else the machine runs; the parent's CPU until the first
job (read by the job itself from ``/proc/<parent>/schedstat``) is the work on the start
path and depends much less on it: both are given, as min and median.

Each round also times two floors from ``exec`` to exit, with the same interpreter and
environment: ``python -c pass`` (the interpreter and its site setup) and ``python -c
"import click, psycopg"`` (the fixed dependencies that any start of ``supervisor run``
imports before its own code, the way it imports them: the collector off, no metadata
lookup). What lies between the second floor and the first job is the product's own:
its modules, the fork, the connections and the claim.

Usage: python scripts/bench/startup.py [--rounds 15] [--code DIR ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue

DATABASE = "supervisor_bench_startup"
APP_DIR = Path(__file__).resolve().parent / "startup_app"


def once(dsn: str) -> tuple[float, float]:
    """(seconds from exec to the first job, the parent's CPU seconds until then)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE supervisor.jobs")
    enqueue("startup_probe", {}, queue="bench_startup", dsn=dsn)
    env = common.supervisor_env(dsn)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(APP_DIR)])
    command = [sys.executable, "-m", "supervisor", "run", "--app", "startup_probe",
               "--log-level", "warning", "--burst", "-n", "2"]
    began = time.time()
    proc = subprocess.run(command, env=env, cwd=str(APP_DIR), capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"supervisor run failed:\n{proc.stderr[-2000:]}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        (result,) = conn.execute("SELECT result::text FROM supervisor.jobs").fetchone()
    record = orjson.loads(result)
    return record["at"] - began, record["parent_cpu_ns"] / 1e9


# Imported as ``supervisor run`` imports them: the collector off, psycopg's version
# given without a metadata lookup (``supervisor.cli.early``, ``supervisor.cli.versions``).
FLOORS = {"interpreter": "pass",
          "interpreter + click + psycopg": (
              "import gc; gc.disable(); from supervisor.cli import versions; "
              "versions.known_versions(versions.PSYCOPG); import click, psycopg")}


def floor(statement: str, env: dict[str, str]) -> float:
    """Seconds from exec to exit of ``python -c statement``."""
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", statement], env=env, check=True, timeout=60)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--code", nargs="*", default=[str(common.ROOT)])
    args = parser.parse_args()
    names = {code: f"{DATABASE}_{i}" for i, code in enumerate(args.code)}
    dsns = {code: common.scratch_database_for(args.dsn, name, code)
            for code, name in names.items()}
    results: dict[str, list[tuple[float, float]]] = {code: [] for code in args.code}
    floors: dict[str, list[float]] = {name: [] for name in FLOORS}
    print(f"load average before {os.getloadavg()}", flush=True)
    try:
        for _ in range(args.rounds):
            for code, dsn in dsns.items():
                os.environ["BENCH_CODE"] = code
                results[code].append(once(dsn))
            env = common.supervisor_env(args.dsn)
            for name, statement in FLOORS.items():
                floors[name].append(floor(statement, env))
        print(f"load average after {os.getloadavg()}", flush=True)
    finally:
        os.environ.pop("BENCH_CODE", None)
        for name in names.values():
            common.drop_database(args.dsn, name)
    for name, walls in floors.items():
        print(f"| floor: {name} | exec to exit: min {min(walls) * 1000:.0f} ms, median "
              f"{statistics.median(walls) * 1000:.0f} ms | | {len(walls)} runs |")
    for code, runs in results.items():
        walls = [w for w, _ in runs]
        cpus = [c for _, c in runs]
        print(f"| {os.path.basename(code.rstrip('/'))} | exec to first job: min "
              f"{min(walls) * 1000:.0f} ms, median {statistics.median(walls) * 1000:.0f} ms "
              f"| parent CPU until then: min {min(cpus) * 1000:.0f} ms, median "
              f"{statistics.median(cpus) * 1000:.0f} ms | {len(runs)} runs |")


if __name__ == "__main__":
    main()
