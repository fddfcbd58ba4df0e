"""The same no-op jobs through procrastinate, PgQueuer and ``supervisor run``, side by side.

Each peer is the latest release from PyPI, installed by this script into its own
virtualenv (created on first use, reused afterwards; never into ours), and each run uses
a fresh database on the same PostgreSQL, set up by the project's own schema tooling and
dropped afterwards. For every system and setting, ``runs`` times:

* enqueue: one call of its bulk API for all the jobs, timed around that call alone, with
  the connection already open (procrastinate ``batch_defer_async``, PgQueuer
  ``Queries.enqueue`` with lists, ours ``enqueue_many`` plus the commit);
* ``ANALYZE`` of the database, for every system alike (autovacuum would do it at an
  unpredictable moment of the run; ``--no-analyze`` skips it);
* drain: from starting the worker process to every job done, start-up included. The
  peers' workers are stopped (SIGTERM, then SIGKILL) once polling their tables, every
  50 ms, finds nothing left; ``supervisor run --burst`` is timed to its own exit.

Peers run their handlers inside their own asyncio process; ours runs each job in a forked
child process, isolated from the parent. Every wait is bounded: a worker that overruns
``--timeout`` is killed and reported, and the other systems still run.

Usage: /work/venv/bin/python scripts/bench/peers.py --jobs 20000 --runs 3
       [--dsn DSN] [--venv-dir DIR] [--upgrade] [--timeout SECONDS] [--no-analyze]
       [--systems ours,procrastinate,pgqueuer]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue_many

PEER_APPS = common.BENCH / "peer_apps"
POLL_INTERVAL = 0.05  # seconds between checks of a peer's tables while it drains
STOP_GRACE = 10.0  # seconds a stopped worker gets before SIGKILL
INSTALL_TIMEOUT = 900.0  # seconds for creating a venv and pip installing into it
SETUP_TIMEOUT = 120.0  # seconds for a schema setup or an enqueue subprocess


class BenchError(Exception):
    """A run that failed or timed out; reported in the table instead of a figure."""


@dataclass
class Result:
    """The runs of one system with one setting."""

    system: str
    setting: str
    enqueue: list[float] = field(default_factory=list)  # jobs/s per run
    drain: list[float] = field(default_factory=list)  # jobs/s per run
    error: str = ""


@dataclass(frozen=True)
class PeerVenv:
    """A peer's own virtualenv: its python, bin directory and installed version."""

    name: str
    python: Path
    version: str

    @property
    def bin(self) -> Path:
        return self.python.parent


# -- peer virtualenvs -------------------------------------------------------------------


def default_venv_dir() -> Path:
    """Where peer venvs live: ``$BENCH_VENV_DIR``, else a folder in the temp directory."""
    return Path(os.environ.get("BENCH_VENV_DIR")
                or Path(tempfile.gettempdir()) / "supervisor-bench-venvs")


def ensure_venv(root: Path, name: str, requirement: str, dist: str,
                upgrade: bool = False) -> PeerVenv:
    """Create ``root/name`` with ``requirement`` installed unless it is there already."""
    venv = root / name
    python = venv / "bin" / "python"
    if not python.exists():
        root.mkdir(parents=True, exist_ok=True)
        check([sys.executable, "-m", "venv", str(venv)], timeout=INSTALL_TIMEOUT,
              what=f"creating the {name} venv")
    if upgrade or installed_version(python, dist) is None:
        check([str(python), "-m", "pip", "install", "--quiet", "--upgrade", requirement],
              timeout=INSTALL_TIMEOUT, what=f"pip install {requirement}")
    version = installed_version(python, dist)
    if version is None:
        raise BenchError(f"{dist} is not importable in {venv} after pip install")
    return PeerVenv(name, python, version)


def installed_version(python: Path, dist: str) -> str | None:
    """The version of ``dist`` installed for ``python``, or None."""
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                          timeout=60)
    return proc.stdout.strip() if proc.returncode == 0 else None


def peer_env(dsn: str) -> dict[str, str]:
    """Environment for a peer's processes: its DSN and our peer_apps on the path only."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(BENCH_DSN=dsn, PGDSN=dsn, PYTHONPATH=str(PEER_APPS), PYTHONUNBUFFERED="1")
    return env


# -- subprocesses -----------------------------------------------------------------------


def check(cmd: list[str], *, timeout: float, what: str,
          env: dict[str, str] | None = None) -> str:
    """Run ``cmd`` to completion within ``timeout``; its stdout, or BenchError."""
    try:
        proc = subprocess.run(cmd, env=env, cwd=str(PEER_APPS), capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what}: timed out after {timeout:.0f} s (killed)")
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-1500:]
        raise BenchError(f"{what}: exit {proc.returncode}\n{tail}")
    return proc.stdout


def timed_enqueue(cmd: list[str], env: dict[str, str], jobs: int) -> float:
    """Jobs/s reported by a peer's enqueue script (it prints {"seconds": ...})."""
    out = check(cmd, env=env, timeout=SETUP_TIMEOUT, what="enqueue")
    return jobs / json.loads(out.strip().splitlines()[-1])["seconds"]


def stop(proc: subprocess.Popen) -> bool:
    """SIGTERM the process group, SIGKILL it after the grace; True if it had to be killed."""
    if proc.poll() is not None:
        return False
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_GRACE)
        return False
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return False
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=STOP_GRACE)
    return True


def drain(cmd: list[str], env: dict[str, str], dsn: str, left_sql: str,
          timeout: float) -> float:
    """Seconds from starting a peer's worker until ``left_sql`` counts 0 jobs left.

    The worker runs in its own process group with its output in a temporary file (a pipe
    nobody reads could block it); it is stopped once done, and killed on timeout.
    """
    with psycopg.connect(dsn, autocommit=True) as conn, \
            tempfile.TemporaryFile("w+") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=str(PEER_APPS), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while True:
                if conn.execute(left_sql).fetchone()[0] == 0:
                    elapsed = time.perf_counter() - t0
                    break
                if proc.poll() is not None:
                    raise BenchError(f"worker exited {proc.returncode} before the end:\n"
                                     f"{tail_of(log)}")
                if time.perf_counter() - t0 > timeout:
                    raise BenchError(f"drain timed out after {timeout:.0f} s (worker killed)")
                time.sleep(POLL_INTERVAL)
        finally:
            if stop(proc):
                print(f"  note: {cmd[-1]} needed SIGKILL to stop", file=sys.stderr)
        return elapsed


def tail_of(log, chars: int = 1500) -> str:
    """The end of a worker's captured output."""
    log.flush()
    log.seek(0)
    return log.read()[-chars:]


# -- databases --------------------------------------------------------------------------


def fresh_database(base_dsn: str, name: str) -> str:
    """An empty database called ``name`` (recreated if left over); its DSN as a URL."""
    common.drop_database(base_dsn, name)
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return url_dsn(base_dsn, name)


def url_dsn(base_dsn: str, dbname: str) -> str:
    """``base_dsn`` (URL or key=value) as a ``postgresql://`` URL naming ``dbname``.

    asyncpg, under PgQueuer, accepts URLs only; a socket directory goes in ``?host=``.
    """
    params = conninfo_to_dict(base_dsn)
    params.pop("dbname", None)
    user = quote(str(params.pop("user", "")), safe="")
    password = params.pop("password", None)
    auth = f"{user}:{quote(str(password), safe='')}@" if password else (
        f"{user}@" if user else "")
    host = str(params.get("host", ""))
    netloc = ""
    if host and not host.startswith("/"):
        params.pop("host")
        netloc = f"[{host}]" if ":" in host else host
        if "port" in params:
            netloc += f":{params.pop('port')}"
    query = f"?{urlencode(params)}" if params else ""
    return f"postgresql://{auth}{netloc}/{quote(dbname, safe='')}{query}"


def analyze(dsn: str) -> None:
    """Fresh planner statistics for every table of the database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")


def scalar(dsn: str, sql: str) -> int:
    """The single value ``sql`` returns."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql).fetchone()[0]


def expect(done: int, jobs: int, what: str) -> None:
    """Fail the run unless exactly ``jobs`` jobs were done."""
    if done != jobs:
        raise BenchError(f"{what}: {done} of {jobs} jobs done")


# -- one run of each system -------------------------------------------------------------


@dataclass(frozen=True)
class Bench:
    """What every run shares."""

    base_dsn: str
    jobs: int
    timeout: float
    analyze: bool


def procrastinate_once(bench: Bench, venv: PeerVenv, concurrency: int) -> tuple[float, float]:
    """Enqueue and drain rates of procrastinate with ``worker --concurrency N``."""
    dsn = fresh_database(bench.base_dsn, "bench_peer_procrastinate")
    try:
        env = peer_env(dsn)
        script = str(PEER_APPS / "peer_procrastinate.py")
        check([str(venv.python), script, "schema"], env=env, timeout=SETUP_TIMEOUT,
              what="procrastinate schema")
        enq = timed_enqueue([str(venv.python), script, "enqueue", str(bench.jobs)], env,
                            bench.jobs)
        if bench.analyze:
            analyze(dsn)
        if concurrency > 1:  # a pool as large as the concurrency plus one, as its docs say
            env["BENCH_POOL_MAX_SIZE"] = str(concurrency + 1)
        cmd = [str(venv.bin / "procrastinate"), "--app=peer_procrastinate.app", "worker",
               "--queues=bench", f"--concurrency={concurrency}"]
        seconds = drain(cmd, env, dsn, "SELECT count(*) FROM procrastinate_jobs "
                        "WHERE status IN ('todo', 'doing')", bench.timeout)
        expect(scalar(dsn, "SELECT count(*) FROM procrastinate_jobs "
                           "WHERE status = 'succeeded'"), bench.jobs, "procrastinate")
        return enq, bench.jobs / seconds
    finally:
        common.drop_database(bench.base_dsn, "bench_peer_procrastinate")


def pgqueuer_once(bench: Bench, venv: PeerVenv, batch_size: int) -> tuple[float, float]:
    """Enqueue and drain rates of PgQueuer (asyncpg) with ``batch_size``."""
    dsn = fresh_database(bench.base_dsn, "bench_peer_pgqueuer")
    try:
        env = peer_env(dsn)
        script = str(PEER_APPS / "peer_pgqueuer.py")
        for sub in ("install", "autovac"):
            check([str(venv.bin / "pgq"), sub], env=env, timeout=SETUP_TIMEOUT,
                  what=f"pgq {sub}")
        enq = timed_enqueue([str(venv.python), script, "enqueue", str(bench.jobs)], env,
                            bench.jobs)
        if bench.analyze:
            analyze(dsn)
        cmd = [str(venv.python), script, "worker", str(batch_size)]
        # Finished jobs leave the queue table for pgqueuer_log (flushed with the deletion).
        seconds = drain(cmd, env, dsn, "SELECT count(*) FROM pgqueuer", bench.timeout)
        expect(scalar(dsn, "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"),
               bench.jobs, "PgQueuer")
        return enq, bench.jobs / seconds
    finally:
        common.drop_database(bench.base_dsn, "bench_peer_pgqueuer")


def ours_once(bench: Bench, prefetch: int | None) -> tuple[float, float]:
    """Enqueue and drain rates of ``enqueue_many`` and ``supervisor run -n 2 --burst``."""
    dsn = common.scratch_database(bench.base_dsn, "bench_peer_ours")
    try:
        with psycopg.connect(dsn) as conn:
            t0 = time.perf_counter()
            enqueue_many("run_noop", [{}] * bench.jobs, queue="bench", conn=conn)
            conn.commit()
            enq = bench.jobs / (time.perf_counter() - t0)
        if bench.analyze:
            analyze(dsn)
        args = ["-n", "2", "-q", "bench"]
        if prefetch is not None:
            args += ["--prefetch", str(prefetch)]
        try:
            seconds = common.run_burst(dsn, *args, timeout=bench.timeout)
        except subprocess.TimeoutExpired:
            raise BenchError(f"supervisor run timed out after {bench.timeout:.0f} s (killed)")
        except SystemExit as exc:  # run_burst's way of reporting a failed run
            raise BenchError(str(exc))
        expect(common.count_state(dsn, "completed"), bench.jobs, "supervisor run")
        return enq, bench.jobs / seconds
    finally:
        common.drop_database(bench.base_dsn, "bench_peer_ours")


def repeat(result: Result, runs: int, once: Callable[[], tuple[float, float]]) -> Result:
    """Fill ``result`` with ``runs`` runs of ``once``; the first failure ends it."""
    for i in range(runs):
        print(f"{result.system} ({result.setting}): run {i + 1}/{runs}", file=sys.stderr)
        try:
            enq, rate = once()
        except BenchError as exc:
            result.error = str(exc).splitlines()[0]
            print(f"  failed: {exc}", file=sys.stderr)
            return result
        result.enqueue.append(enq)
        result.drain.append(rate)
        print(f"  enqueue {enq:,.0f}/s, drain {rate:,.0f}/s", file=sys.stderr)
    return result


# -- the whole comparison ---------------------------------------------------------------


SYSTEMS = ("ours", "procrastinate", "pgqueuer")


def measure(base_dsn: str, jobs: int, runs: int, *, venv_dir: Path | None = None,
            upgrade: bool = False, timeout: float | None = None,
            analyze_first: bool = True, systems: tuple[str, ...] = SYSTEMS) -> list[Result]:
    """Every system and setting, ``runs`` times each; ours first, then the peers."""
    bench = Bench(base_dsn, jobs, timeout or 60 + jobs / 50, analyze_first)
    root = venv_dir or default_venv_dir()
    results = []
    if "ours" in systems:
        results += [
            repeat(Result("ours", "`supervisor run -n 2 --burst --prefetch 64`"), runs,
                   lambda: ours_once(bench, 64)),
            repeat(Result("ours", "`supervisor run -n 2 --burst` (defaults: prefetch auto)"),
                   runs, lambda: ours_once(bench, None)),
        ]
    peers = [
        ("procrastinate", "procrastinate", "procrastinate",
         [("`worker --concurrency 1` (default)", lambda v: procrastinate_once(bench, v, 1)),
          ("`worker --concurrency 30`, pool 31 (docs' example and pool advice)",
           lambda v: procrastinate_once(bench, v, 30))]),
        ("pgqueuer", "pgqueuer[asyncpg]", "pgqueuer",
         [("asyncpg, `batch_size=10` (default)", lambda v: pgqueuer_once(bench, v, 10)),
          ("asyncpg, `batch_size=25` (tuning guide)", lambda v: pgqueuer_once(bench, v, 25))]),
    ]
    for name, requirement, dist, settings in peers:
        if name not in systems:
            continue
        try:
            venv = ensure_venv(root, name, requirement, dist, upgrade)
        except BenchError as exc:
            results.append(Result(name, "install", error=str(exc).splitlines()[0]))
            continue
        label = f"{'PgQueuer' if name == 'pgqueuer' else name} {venv.version}"
        for setting, once in settings:
            results.append(repeat(Result(label, setting), runs,
                                  lambda once=once, venv=venv: once(venv)))
    return results


def fmt_rate(values: list[float]) -> str:
    """Median jobs/s, or a dash when there is no run."""
    return f"{common.median(values):,.0f}/s" if values else "-"


def reference(results: list[Result]) -> Result | None:
    """Our headline result (the first row), if it has figures."""
    ok = results and results[0].system == "ours" and results[0].drain
    return results[0] if ok else None


def ratio(ours: Result | None, theirs: Result) -> str:
    """Our median drain rate over theirs (a dash for our own other settings)."""
    if ours is None or not theirs.drain or theirs.system == "ours":
        return "-"
    return f"{common.median(ours.drain) / common.median(theirs.drain):.2f}x"


def side_by_side(results: list[Result], jobs: int) -> str:
    """The markdown table: every system and setting, with ours/theirs for drain."""
    ours = reference(results)
    lines = [f"| system | setting | enqueue {jobs:,} (bulk API) | drain {jobs:,} "
             "(start-up included) | ours/theirs (drain) |", "|---|---|---|---|---|"]
    for r in results:
        drain_cell = fmt_rate(r.drain) if not r.error else f"failed: {r.error}"
        mark = "(reference)" if r is ours else ratio(ours, r)
        lines.append(f"| {r.system} | {r.setting} | {fmt_rate(r.enqueue)} | {drain_cell} "
                     f"| {mark} |")
    return "\n".join(lines)


def as_rows(results: list[Result], jobs: int) -> list[tuple[str, str]]:
    """(measurement, result) rows for a two-column report."""
    ours = reference(results)
    rows = []
    for r in results:
        if r.error:
            rows.append((f"{r.system}, {r.setting}", f"failed: {r.error}"))
            continue
        name = f"{r.system}, {r.setting}"
        rows.append((f"{name}: enqueue {jobs:,} no-op jobs (bulk API)", fmt_rate(r.enqueue)))
        drain = fmt_rate(r.drain)
        if r.system != "ours" and ours is not None:
            drain += f" (ours/theirs {ratio(ours, r)})"
        rows.append((f"{name}: drain {jobs:,} no-op jobs (start-up included)", drain))
    return rows


def run(base_dsn: str, jobs: int = 20_000, runs: int = 3) -> list[tuple[str, str]]:
    """The comparison as (measurement, result) rows; medians of ``runs`` runs."""
    results = measure(base_dsn, jobs, runs)
    print(side_by_side(results, jobs), file=sys.stderr)
    return as_rows(results, jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--venv-dir", type=Path, default=None,
                        help="where the peers' venvs live (default: $BENCH_VENV_DIR, "
                             "else <tmp>/supervisor-bench-venvs)")
    parser.add_argument("--upgrade", action="store_true",
                        help="pip install --upgrade the peers even if present")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds allowed per drain (default: 60 + jobs/50)")
    parser.add_argument("--no-analyze", action="store_true",
                        help="do not ANALYZE between enqueue and drain")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="comma-separated subset of: " + ", ".join(SYSTEMS))
    args = parser.parse_args()

    # SIGTERM unwinds like Ctrl-C, so workers are stopped and databases dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load_before = os.getloadavg()
    results = measure(args.dsn, args.jobs, args.runs, venv_dir=args.venv_dir,
                      upgrade=args.upgrade, timeout=args.timeout,
                      analyze_first=not args.no_analyze,
                      systems=tuple(args.systems.split(",")))
    facts = common.machine(args.dsn)
    print(f"Machine: {facts['cpu']}, {facts['memory']}, {facts['os']}; Python "
          f"{facts['python']}; PostgreSQL {facts['postgresql']}; psycopg {facts['psycopg']}")
    print(f"Load average before / after: {' '.join(f'{x:.2f}' for x in load_before)} / "
          f"{facts['load']}; medians of {args.runs} runs; "
          f"{'ANALYZE after enqueue' if not args.no_analyze else 'no ANALYZE'}\n")
    print(side_by_side(results, args.jobs))


if __name__ == "__main__":
    main()
