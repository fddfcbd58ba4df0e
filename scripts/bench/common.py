"""Plumbing every benchmark shares: a scratch database, running ``supervisor run`` as
a subprocess with the benchmark handlers, medians, and a description of the machine."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

BENCH = Path(__file__).resolve().parent
SCRIPTS = BENCH.parent
ROOT = SCRIPTS.parent
for path in (str(ROOT), str(SCRIPTS)):
    if path not in sys.path:
        sys.path.insert(0, path)
# Last, so no test helper shadows a module: for tests/legacy_schema.py, the schema files
# from before the baseline that the benchmarks of old migrations build on.
if str(ROOT / "tests") not in sys.path:
    sys.path.append(str(ROOT / "tests"))

from shared.migrate import migrate  # noqa: E402

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
# Appended to every scratch database's name: two benchmarks of one name run at once on a
# shared server (several checkouts) would otherwise drop each other's database.
DB_SUFFIX = os.environ.get("SUPERVISOR_BENCH_DB_SUFFIX", "")


def scratch_database(base_dsn: str, name: str) -> str:
    """A fresh, migrated database called ``name`` (dropped first if it exists)."""
    name += DB_SUFFIX
    drop_database(base_dsn, name, suffixed=True)
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(base_dsn, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
    return dsn


def scratch_database_for(base_dsn: str, name: str, code: str) -> str:
    """A fresh database called ``name`` migrated by the checkout at ``code`` (its own
    ``supervisor migrate``): a before/after comparison across a schema change needs one
    database per checkout, since a checkout refuses a schema newer than its own."""
    name += DB_SUFFIX
    drop_database(base_dsn, name, suffixed=True)
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(base_dsn, dbname=name)
    env = dict(os.environ, PYTHONPATH=code)
    # From the checkout itself: ``-m`` puts the working directory before PYTHONPATH.
    subprocess.run([sys.executable, "-m", "supervisor", "migrate", "--dsn", dsn], env=env,
                   cwd=code, check=True, capture_output=True, timeout=120)
    return dsn


def drop_database(base_dsn: str, name: str, suffixed: bool = False) -> None:
    """Drop the scratch database ``name`` (with ``DB_SUFFIX`` unless ``suffixed``)."""
    if not suffixed:
        name += DB_SUFFIX
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def reset(dsn: str) -> None:
    """Empty the queue tables and refresh statistics, so runs start alike."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE supervisor.jobs, supervisor.supervisors, supervisor.queues")
        conn.execute("VACUUM ANALYZE supervisor.jobs")


def supervisor_cmd(*args: str) -> list[str]:
    """``supervisor run --app bench_handlers ...`` for this interpreter."""
    return [sys.executable, "-m", "supervisor", "run", "--app", "bench_handlers",
            "--log-level", "warning", *args]


def supervisor_env(dsn: str, **extra: str) -> dict[str, str]:
    """The environment of a benchmarked ``supervisor run``. ``BENCH_CODE`` names another
    checkout whose code should run instead (before/after comparisons in one run).

    The code runs from compiled bytecode, as it does for a user: pip compiles what it
    installs, and Python caches what it compiles on first import. A shell that sets
    ``PYTHONDONTWRITEBYTECODE`` (these sandboxes do) would otherwise have every run
    compile the checkout's modules again: about 0.12 s of each start-up here, which
    ``multiprocessing.Pool`` in a running interpreter never pays."""
    root = Path(os.environ.get("BENCH_CODE", ROOT))
    compile_checkout(root)
    env = dict(os.environ, SUPERVISOR_DSN=dsn,
               PYTHONPATH=os.pathsep.join([str(root / "scripts"), str(root)]), **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


_compiled: set[Path] = set()


def compile_checkout(root: Path) -> None:
    """Write the bytecode cache of a checkout's packages once per benchmark process."""
    if root in _compiled:
        return
    import compileall

    for package in ("shared", "supervisor", "workers", "scripts"):
        compileall.compile_dir(str(root / package), quiet=1)
    _compiled.add(root)


def run_burst(dsn: str, *args: str, timeout: float = 900) -> float:
    """Seconds from starting ``supervisor run --burst`` to its exit."""
    t0 = time.perf_counter()
    env = supervisor_env(dsn)
    proc = subprocess.run(supervisor_cmd("--burst", *args), env=env,
                          cwd=env["PYTHONPATH"].split(os.pathsep)[0], capture_output=True,
                          text=True, timeout=timeout)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"supervisor run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed


def count_state(dsn: str, state: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state = %s",
                            (state,)).fetchone()[0]


# A finished job's ``usage`` as the supervisor writes it, for SQL that seeds jobs from
# ``generate_series(...) AS g`` (figures varied by g; ``%%`` as psycopg needs).
USAGE_AS_WRITTEN_SQL = """jsonb_build_object('cpu_seconds', 0.0004 + (g %% 7) / 10000.0,
                          'wall_seconds', 0.002, 'max_rss_bytes', 30000000 + g %% 999)"""


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def machine(dsn: str = DEFAULT_DSN) -> dict[str, str]:
    """Facts for the report's header."""
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kib / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    with psycopg.connect(dsn, autocommit=True) as conn:
        pg = conn.execute("SHOW server_version").fetchone()[0]
        sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
    import orjson

    return {
        "cpu": f"{os.cpu_count()} vCPU ({cpu})", "memory": mem,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(), "postgresql": f"{pg} (synchronous_commit={sync})",
        "psycopg": psycopg.__version__, "orjson": orjson.__version__,
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def cli(run, description: str, **options) -> None:
    """The ``main()`` of a benchmark script: ``--dsn`` plus ``options`` (name: default),
    passed to ``run(dsn, **options)``; prints its rows as markdown table lines."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    for name, default in options.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    args = vars(parser.parse_args())
    for label, value in run(args.pop("dsn"), **args):
        print(f"| {label} | {value} |")
