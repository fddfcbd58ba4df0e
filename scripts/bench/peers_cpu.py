"""CPU-bound jobs through Celery, Dramatiq, RQ and ``supervisor run``, against
``multiprocessing.Pool(2)``, interleaved round by round; their no-op rates; and what each
does with a job running when it gets SIGTERM.

Every system runs the same pure-Python job (``peer_apps/bench_job.py``) in 2 worker
processes, and every job ends by incrementing one Redis counter, so completion is seen
the same way everywhere:

* efficiency: ``--cpu-seconds`` of work (10 by default) split into jobs of 5, 20 and
  100 ms of CPU (calibrated here), pre-enqueued, timed from starting the workers to the
  last completion (the moment the counter reaches the number of jobs); each round runs
  the Pool (chunksize 1), then every system, so load that comes and goes falls on all
  alike. Efficiency is the Pool's median time over the system's. The ``pool-script``
  row runs the same Pool as a program started for each run (``peer_apps/peer_pool.py``),
  timed from its ``exec`` like the workers: what a user's own Pool script pays to start.
* no-op rate: ``--noop-jobs`` counted no-op jobs, pre-enqueued, jobs/s from starting the
  workers to the last completion; interleaved the same way.
* SIGTERM: one job longer than ``--stop-grace`` runs; once it has started the worker's
  main process gets SIGTERM (as ``docker stop`` or ``kill`` send it), and after the
  grace every process it started gets SIGKILL (as an orchestrator ends a container).
  A fresh worker then runs for ``--sigterm-window`` seconds. The word: ``finished``
  (the job completed before the worker was gone), ``requeued`` (it ran again and
  completed after the restart), ``held`` (the broker still holds it as delivered to the
  dead worker; it comes back after a timeout of the system's), ``failed`` (the system
  marked it failed) or ``lost`` (nowhere).

Peers are installed from PyPI into virtualenvs of their own (created by this script, never
into ours), with a private Redis and RabbitMQ started here on loopback ports (stopped at
the end). Every wait is bounded; a system whose install or run fails is reported in the
table, and the others still run.

Usage: python scripts/bench/peers_cpu.py [--rounds 3] [--cpu-seconds 10]
       [--lengths 5,20,100] [--noop-jobs 5000] [--stop-grace 30] [--sigterm-window 20]
       [--systems pool,ours,celery-redis,...] [--parts cpu,noop,sigterm]
       [--venv-dir DIR] [--upgrade] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
import peers
import peers_brokers
from peers import BenchError, PeerVenv

sys.path.insert(0, str(peers.PEER_APPS))
import bench_job

from shared.enqueue import enqueue_many

DATABASE = "bench_peers_cpu"
OURS_QUEUE = "peers"
IDLE_STOP_GRACE = 10.0  # seconds an idle worker gets to exit on SIGTERM after a run
DONE_POLL = 1  # seconds per BLPOP while waiting for the last completion


# -- the systems ------------------------------------------------------------------------


@dataclass(frozen=True)
class System:
    """One system with one setting: how to install, enqueue into and start it."""

    key: str
    label: str
    venv: str | None = None  # peer venv name; None for the Pool and ours
    requirement: str = ""
    dist: str = ""
    broker: str | None = None  # "redis" or "amqp"
    app: str = ""  # module in peer_apps
    settings: str = ""  # $BENCH_SETTINGS for the app
    worker: Callable[[Path, str, bool], list[list[str]]] | None = None


def celery_worker(fair: bool) -> Callable[[Path, str, bool], list[list[str]]]:
    def cmds(bin_dir: Path, broker: str, burst: bool) -> list[list[str]]:
        cmd = [str(bin_dir / "celery"), "-A", "peer_celery", "worker", "-P", "prefork",
               "-c", "2", "--loglevel", "WARNING"]
        return [cmd + (["-O", "fair"] if fair else [])]
    return cmds


def dramatiq_worker(bin_dir: Path, broker: str, burst: bool) -> list[list[str]]:
    return [[str(bin_dir / "dramatiq"), "peer_dramatiq", "-p", "2", "-t", "1"]]


def rq_worker(simple: bool) -> Callable[[Path, str, bool], list[list[str]]]:
    def cmds(bin_dir: Path, broker: str, burst: bool) -> list[list[str]]:
        cmd = [str(bin_dir / "rq"), "worker", "-u", broker, "--quiet"]
        cmd += ["--burst"] if burst else []
        cmd += ["-w", "rq.worker.SimpleWorker"] if simple else []
        return [[*cmd, "default"]] * 2
    return cmds


CELERY = dict(venv="celery", requirement="celery[redis]", dist="celery", app="peer_celery")
SYSTEMS = (
    System("pool", "`multiprocessing.Pool(2)`, chunksize 1"),
    System("pool-script", "the same Pool as a script started for the run, timed from its "
           "`exec` like every worker below"),
    System("ours", "pg-supervisor `supervisor run -n 2 --burst`, defaults"),
    System("celery-redis", "Celery prefork `-c 2`, Redis, defaults", broker="redis",
           worker=celery_worker(False), **CELERY),
    System("celery-redis-long", "Celery prefork `-c 2`, Redis, `-O fair` + prefetch 1 + "
           "acks_late", broker="redis", settings="long", worker=celery_worker(True),
           **CELERY),
    System("celery-rabbitmq", "Celery prefork `-c 2`, RabbitMQ, defaults", broker="amqp",
           worker=celery_worker(False), **CELERY),
    System("celery-rabbitmq-long", "Celery prefork `-c 2`, RabbitMQ, `-O fair` + "
           "prefetch 1 + acks_late", broker="amqp", settings="long",
           worker=celery_worker(True), **CELERY),
    System("dramatiq", "Dramatiq `-p 2 -t 1`, Redis", venv="dramatiq",
           requirement="dramatiq[redis]", dist="dramatiq", broker="redis",
           app="peer_dramatiq", worker=dramatiq_worker),
    System("rq-simple", "RQ `SimpleWorker` x 2, Redis", venv="rq", requirement="rq",
           dist="rq", broker="redis", app="peer_rq", worker=rq_worker(True)),
    System("rq-fork", "RQ `Worker` (fork per job) x 2, Redis", venv="rq", requirement="rq",
           dist="rq", broker="redis", app="peer_rq", worker=rq_worker(False)),
)
PARTS = ("cpu", "noop", "sigterm")
REFERENCES = ("pool", "pool-script")  # the Pool's rows: measured against, not peers


@dataclass
class Outcome:
    """A system's measurements: seconds per run for each part, or why it has none."""

    system: System
    version: str = ""
    seconds: dict[str, list[float]] = field(default_factory=dict)  # part -> per round
    errors: dict[str, str] = field(default_factory=dict)  # part -> first error
    sigterm: str = ""


@dataclass
class Bench:
    """What every run needs: the database, the servers, the venvs, the settings."""

    dsn: str
    redis: peers_brokers.Server
    rabbitmq: peers_brokers.Server | None
    rabbitmq_error: str
    venvs: dict[str, PeerVenv]
    cpu_timeout: float
    noop_timeout: float
    stop_grace: float
    sigterm_window: float

    def broker_url(self, system: System) -> str:
        if system.broker == "amqp":
            if self.rabbitmq is None:
                raise BenchError(f"RabbitMQ: {self.rabbitmq_error}")
            return self.rabbitmq.url
        return self.redis.url


# -- processes --------------------------------------------------------------------------


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every process visible in /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        table[int(entry)] = (int(fields[1]), fields[19])
    return table


def tree(roots: list[int]) -> dict[int, str]:
    """The processes ``roots`` started, themselves included: pid -> start time (so a pid
    reused by another process later is never signalled)."""
    table = process_table()
    found = {pid: table[pid][1] for pid in roots if pid in table}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, start) in table.items():
            if ppid in found and pid not in found:
                found[pid] = start
                grew = True
    return found


def kill_tree(members: dict[int, str]) -> None:
    """SIGKILL every process of ``members`` still alive as the same process."""
    table = process_table()
    for pid, start in members.items():
        if pid in table and table[pid][1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def stop_workers(procs: list[subprocess.Popen], grace: float) -> bool:
    """SIGTERM each worker's main process; after ``grace`` seconds SIGKILL every process
    they started (orphans included). True if all main processes exited within the grace."""
    members = tree([p.pid for p in procs if p.poll() is None])
    for proc in procs:
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    clean = all(p.poll() is not None for p in procs)
    members.update(tree(list(members)))
    kill_tree(members)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    return clean


def worker_env(bench: Bench, system: System, target: int) -> dict[str, str]:
    """The environment of a system's workers: the counter, the target, the broker."""
    extra = {"BENCH_COUNTER": bench.redis.address, "BENCH_TARGET": str(target),
             "PYTHONUNBUFFERED": "1"}
    if system.key == "ours":
        env = common.supervisor_env(bench.dsn, **extra)
        env["PYTHONPATH"] += os.pathsep + str(peers.PEER_APPS)
        return env
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")}
    env.update(extra, PYTHONPATH=str(peers.PEER_APPS), BENCH_BROKER=bench.broker_url(system),
               BENCH_SETTINGS=system.settings)
    return env


def worker_cmds(bench: Bench, system: System, burst: bool) -> list[list[str]]:
    if system.key == "ours":
        return [[sys.executable, "-m", "supervisor", "run", "--app", "peer_supervisor",
                 "-n", "2", "-q", OURS_QUEUE, "--log-level", "warning",
                 *(["--burst"] if burst else [])]]
    return system.worker(bench.venvs[system.venv].bin, bench.broker_url(system), burst)


def start_workers(cmds: list[list[str]], env: dict[str, str], log) -> list[subprocess.Popen]:
    cwd = env["PYTHONPATH"].split(os.pathsep)[0]
    return [subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True) for cmd in cmds]


def tail_of(log, chars: int = 1200) -> str:
    log.flush()
    log.seek(0)
    return log.read()[-chars:]


# -- one run ----------------------------------------------------------------------------


KINDS = {"cpu": "peer_cpu", "noop": "peer_noop", "long": "peer_long"}


def enqueue(bench: Bench, system: System, kind: str, count: int, arg: float) -> None:
    """Pre-enqueue ``count`` jobs of ``kind`` for ``system``, with its own API."""
    if system.key == "ours":
        common.reset(bench.dsn)
        args = {"cpu": {"n": int(arg)}, "noop": {}, "long": {"seconds": arg}}[kind]
        enqueue_many(KINDS[kind], [args] * count, queue=OURS_QUEUE, dsn=bench.dsn)
        return
    venv = bench.venvs[system.venv]
    peers.check([str(venv.python), str(peers.PEER_APPS / f"{system.app}.py"), "enqueue",
                 kind, str(count), repr(arg)], env=worker_env(bench, system, 0),
                timeout=peers.SETUP_TIMEOUT, what="enqueue")


def redis(bench: Bench) -> bench_job.Resp:
    return bench_job.Resp(bench.redis.address, timeout=DONE_POLL + 30)


def wait_done(client: bench_job.Resp, procs: list[subprocess.Popen], timeout: float,
              log) -> float:
    """The epoch time at which the counter reached the target; BenchError if the
    workers all exit first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        reply = client.command("BLPOP", bench_job.DONE_KEY, DONE_POLL)
        if reply:
            return float(reply[1])
        if procs and all(p.poll() is not None for p in procs):
            reply = client.command("LPOP", bench_job.DONE_KEY)
            if reply:
                return float(reply)
            raise BenchError(f"workers exited after {counted(client)} jobs:\n{tail_of(log)}")
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s with {counted(client)} jobs "
                             "done (workers killed)")


def counted(client: bench_job.Resp) -> int:
    return int(client.command("GET", bench_job.COUNT_KEY) or 0)


def timed_run(bench: Bench, system: System, kind: str, args: list[int]) -> float:
    """Seconds from starting ``system``'s workers to the last of ``args`` jobs done."""
    client = redis(bench)
    try:
        client.command("FLUSHALL")
        if system.key == "pool":
            return pool_run(bench, client, kind, args)
        env = worker_env(bench, system, len(args))
        if system.key == "pool-script":  # its jobs go on its command line
            cmds = [[sys.executable, str(peers.PEER_APPS / "peer_pool.py"), kind,
                     str(len(args)), str(args[0] if args else 0)]]
        else:
            enqueue(bench, system, kind, len(args), args[0] if args else 0)
            cmds = worker_cmds(bench, system, burst=True)
        timeout = bench.cpu_timeout if kind == "cpu" else bench.noop_timeout
        with tempfile.TemporaryFile("w+") as log:
            t0 = time.time()
            procs = start_workers(cmds, env, log)
            try:
                done = wait_done(client, procs, timeout, log)
            finally:
                stop_workers(procs, IDLE_STOP_GRACE)
        total = counted(client)
        if total != len(args):
            raise BenchError(f"{total} jobs counted for {len(args)} enqueued")
        return done - t0
    finally:
        client.close()


def pool_run(bench: Bench, client: bench_job.Resp, kind: str, args: list[int]) -> float:
    """The reference: ``multiprocessing.Pool(2)`` (fork, chunksize 1), the same job."""
    os.environ.update(BENCH_COUNTER=bench.redis.address, BENCH_TARGET=str(len(args)))
    t0 = time.time()
    timeout = bench.cpu_timeout if kind == "cpu" else bench.noop_timeout
    with multiprocessing.get_context("fork").Pool(2) as pool:
        # Bounded like every other wait: once, a worker of a forked Pool hung on a lock
        # held at the fork and map() never returned.
        try:
            if kind == "cpu":
                pool.map_async(bench_job.cpu, args, chunksize=1).get(timeout)
            else:
                pool.starmap_async(bench_job.noop, [()] * len(args), chunksize=1).get(timeout)
        except multiprocessing.TimeoutError:
            raise BenchError(f"the Pool did not finish within {timeout:.0f} s") from None
    reply = client.command("LPOP", bench_job.DONE_KEY)
    if not reply:
        raise BenchError(f"the Pool counted {counted(client)} of {len(args)} jobs")
    return float(reply) - t0


# -- SIGTERM ----------------------------------------------------------------------------


def sigterm_run(bench: Bench, system: System) -> str:
    """What ``system`` does with a running job at SIGTERM, as one word and a detail."""
    length = bench.stop_grace + 10
    client = redis(bench)
    try:
        client.command("FLUSHALL")
        enqueue(bench, system, "long", 1, length)
        env = worker_env(bench, system, 1)
        cmds = worker_cmds(bench, system, burst=False)
        with tempfile.TemporaryFile("w+") as log:
            procs = start_workers(cmds, env, log)
            try:
                reply = client.command("BLPOP", bench_job.STARTED_KEY, 60)
                if not reply:
                    raise BenchError(f"the long job did not start within 60 s:\n"
                                     f"{tail_of(log)}")
                t_term = time.monotonic()
                clean = stop_workers(procs, bench.stop_grace)
                stopped = time.monotonic() - t_term
            finally:
                stop_workers(procs, 0)
            how = (f"exited {stopped:.1f} s after SIGTERM" if clean
                   else f"SIGKILL after {bench.stop_grace:.0f} s")
            if counted(client):
                return f"finished ({how})"
            procs = start_workers(cmds, env, log)
            t_restart = time.time()
            try:
                # The job starting again is enough: a rerun as long as the first would
                # outlast the window.
                reply = client.command("BLPOP", bench_job.STARTED_KEY,
                                       max(1, round(bench.sigterm_window)))
                where = "" if reply else probe(bench, system)
            finally:
                stop_workers(procs, 0)
            if reply:
                return (f"requeued ({how}; started again "
                        f"{float(reply[1]) - t_restart:.1f} s after the restart)")
            word = {"held": "held", "failed": "failed", "queued": "queued",
                    "gone": "lost"}.get(where, "unknown")
            detail = f": {where}" if word == "unknown" else ""
            return f"{word} ({how}; not run again within {bench.sigterm_window:.0f} s{detail})"
    finally:
        client.close()


def probe(bench: Bench, system: System) -> str:
    """Where the system holds the long job now, in its own terms."""
    if system.key == "ours":
        import psycopg

        with psycopg.connect(bench.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT state FROM supervisor.jobs").fetchone()
        state = row[0] if row else "gone"
        return {"running": "held", "available": "queued", "retryable": "queued",
                "scheduled": "queued"}.get(state, state)
    venv = bench.venvs[system.venv]
    try:
        out = peers.check([str(venv.python), str(peers.PEER_APPS / f"{system.app}.py"),
                           "probe"], env=worker_env(bench, system, 0),
                          timeout=peers.SETUP_TIMEOUT, what="probe")
    except BenchError as exc:
        return f"probe failed: {str(exc).splitlines()[0]}"
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


# -- the whole comparison ---------------------------------------------------------------


def attempt(outcome: Outcome, part: str, run: Callable[[], float]) -> None:
    """One run of ``part`` for ``outcome``'s system, unless that part failed already."""
    if part in outcome.errors:
        return
    name = outcome.system.key
    try:
        seconds = run()
    except Exception as exc:  # any failure of one system is a cell of the table
        outcome.errors[part] = describe(exc)
        print(f"  {name} {part}: failed: {exc}", file=sys.stderr, flush=True)
        return
    outcome.seconds.setdefault(part, []).append(seconds)
    print(f"  {name} {part}: {seconds:.2f} s", file=sys.stderr, flush=True)


def describe(exc: Exception) -> str:
    """The first line of a failure, with its type unless it is one of ours."""
    first = (str(exc).splitlines() or [""])[0]
    return first if isinstance(exc, BenchError) else f"{type(exc).__name__}: {first}"


def measure(args: argparse.Namespace) -> tuple[list[Outcome], dict[str, str]]:
    """Every selected system and part; the outcomes and the versions of the servers."""
    chosen = [s for s in SYSTEMS if s.key in args.systems]
    outcomes = [Outcome(s) for s in chosen]
    root = args.venv_dir or peers.default_venv_dir()
    venvs: dict[str, PeerVenv] = {}
    install_errors: dict[str, str] = {}
    for system in chosen:
        if system.venv and system.venv not in venvs and system.venv not in install_errors:
            print(f"venv {system.venv}: {system.requirement}", file=sys.stderr, flush=True)
            try:
                venvs[system.venv] = peers.ensure_venv(root, system.venv, system.requirement,
                                                       system.dist, args.upgrade)
            except BenchError as exc:
                install_errors[system.venv] = "install: " + str(exc).splitlines()[0]
    import compileall

    compileall.compile_dir(str(peers.PEER_APPS), quiet=1)
    extras = {"celery": ("kombu", "amqp", "redis"), "dramatiq": ("redis",), "rq": ("redis",)}
    versions: dict[str, str] = {}
    for name, venv in venvs.items():
        found = [f"{d} {peers.installed_version(venv.python, d)}" for d in extras.get(name, ())]
        versions[f"{venv.name} {venv.version}"] = f"(with {', '.join(found)})"
    for outcome in outcomes:
        system = outcome.system
        if system.venv in install_errors:
            outcome.errors = {p: install_errors[system.venv] for p in PARTS}
        elif system.venv:
            outcome.version = venvs[system.venv].version
    redis_server = rabbitmq = None
    rabbitmq_error = ""
    dsn = ""
    try:
        redis_server = peers_brokers.start_redis()
        versions["Redis"] = redis_server.version
        if any(s.broker == "amqp" for s in chosen):
            print("starting a private RabbitMQ", file=sys.stderr, flush=True)
            try:
                rabbitmq = peers_brokers.start_rabbitmq()
                versions["RabbitMQ"] = rabbitmq.version
            except peers_brokers.BrokerError as exc:
                rabbitmq_error = str(exc).splitlines()[0]
        if any(s.key == "ours" for s in chosen):
            dsn = common.scratch_database(args.dsn, DATABASE)
        bench = Bench(dsn, redis_server, rabbitmq, rabbitmq_error, venvs,
                      cpu_timeout=120 + 10 * args.cpu_seconds,
                      noop_timeout=60 + args.noop_jobs / 20, stop_grace=args.stop_grace,
                      sigterm_window=args.sigterm_window)
        run_parts(bench, outcomes, args)
    finally:
        for server in (rabbitmq, redis_server):
            if server is not None:
                server.stop()
        if dsn:
            common.drop_database(args.dsn, DATABASE)
    return outcomes, versions


def run_parts(bench: Bench, outcomes: list[Outcome], args: argparse.Namespace) -> None:
    per_ms = calibrate()
    if "cpu" in args.parts:
        for length in args.lengths:
            n = round(per_ms * length)
            jobs = [n] * round(args.cpu_seconds * 1000 / length)
            for r in range(args.rounds):
                print(f"{length} ms x {len(jobs)}, round {r + 1}/{args.rounds}",
                      file=sys.stderr, flush=True)
                for o in outcomes:
                    attempt(o, f"cpu{length}",
                            lambda o=o, jobs=jobs: timed_run(bench, o.system, "cpu", jobs))
    if "noop" in args.parts:
        for r in range(args.rounds):
            print(f"no-op x {args.noop_jobs}, round {r + 1}/{args.rounds}", file=sys.stderr,
                  flush=True)
            for o in outcomes:
                attempt(o, "noop", lambda o=o: timed_run(bench, o.system, "noop",
                                                         [0] * args.noop_jobs))
    if "sigterm" in args.parts:
        for o in outcomes:
            if o.system.key in REFERENCES or "sigterm" in o.errors:
                continue
            print(f"SIGTERM: {o.system.key}", file=sys.stderr, flush=True)
            try:
                o.sigterm = sigterm_run(bench, o.system)
            except Exception as exc:  # as in attempt()
                o.sigterm = f"failed: {describe(exc)}"
            print(f"  {o.sigterm}", file=sys.stderr, flush=True)


def calibrate() -> float:
    """Iterations of ``bench_job.spin`` per millisecond of CPU in this process."""
    bench_job.spin(200_000)
    started = time.process_time()
    bench_job.spin(2_000_000)
    return 2_000_000 / ((time.process_time() - started) * 1000)


# -- the report -------------------------------------------------------------------------


def table(outcomes: list[Outcome], lengths: list[int], noop_jobs: int) -> str:
    """The markdown table: efficiency per job length, no-op rate, SIGTERM."""
    pool = next((o for o in outcomes if o.system.key == "pool"), None)
    head = "| system | " + " | ".join(f"{n} ms" for n in lengths)
    head += f" | no-op x {noop_jobs:,} | SIGTERM, running job |"
    lines = [head, "|---" * (len(lengths) + 3) + "|"]
    for o in outcomes:
        label = o.system.label + (f" ({o.system.dist} {o.version})" if o.version else "")
        cells = [efficiency_cell(o, pool, f"cpu{n}") for n in lengths]
        if "noop" in o.errors:
            cells.append(f"failed: {o.errors['noop']}")
        elif o.seconds.get("noop"):
            cells.append(f"{noop_jobs / common.median(o.seconds['noop']):,.0f}/s")
        else:
            cells.append("-")
        cells.append(o.sigterm or "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def efficiency_cell(o: Outcome, pool: Outcome | None, part: str) -> str:
    if part in o.errors:
        return f"failed: {o.errors[part]}"
    mine = o.seconds.get(part)
    if not mine:
        return "-"
    wall = common.median(mine)
    theirs = pool.seconds.get(part) if pool else None
    if not theirs:
        return f"{wall:.2f} s"
    return f"{common.median(theirs) / wall:.2f} ({wall:.2f} s)"


def ours_version() -> str:
    try:
        out = subprocess.run(["git", "-C", str(common.ROOT), "log", "-1", "--format=%h %cs"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "?"
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu-seconds", type=float, default=10.0)
    parser.add_argument("--lengths", default="5,20,100",
                        help="job lengths in ms of CPU, comma-separated")
    parser.add_argument("--noop-jobs", type=int, default=5000)
    parser.add_argument("--stop-grace", type=float, default=30.0,
                        help="seconds from SIGTERM to SIGKILL (Kubernetes' default: 30); "
                             "the SIGTERM job runs 10 s longer")
    parser.add_argument("--sigterm-window", type=float, default=20.0,
                        help="seconds a restarted worker gets to run the job again")
    parser.add_argument("--systems", default=",".join(s.key for s in SYSTEMS),
                        help="comma-separated subset of: " + ", ".join(s.key for s in SYSTEMS))
    parser.add_argument("--parts", default=",".join(PARTS),
                        help="comma-separated subset of: " + ", ".join(PARTS))
    parser.add_argument("--venv-dir", type=Path, default=None,
                        help="where the peers' venvs live (default: $BENCH_VENV_DIR, "
                             "else <tmp>/supervisor-bench-venvs)")
    parser.add_argument("--upgrade", action="store_true",
                        help="pip install --upgrade the peers even if present")
    args = parser.parse_args(argv)
    known = {s.key for s in SYSTEMS}
    args.systems = args.systems.split(",")
    args.parts = args.parts.split(",")
    try:
        args.lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        parser.error("--lengths takes whole milliseconds, e.g. 5,20,100")
    if unknown := set(args.systems) - known:
        parser.error(f"unknown system(s): {', '.join(sorted(unknown))}")
    if unknown := set(args.parts) - set(PARTS):
        parser.error(f"unknown part(s): {', '.join(sorted(unknown))}")
    if min(args.rounds, args.noop_jobs, *args.lengths) < 1 or args.cpu_seconds <= 0:
        parser.error("--rounds, --noop-jobs, --lengths and --cpu-seconds must be positive")
    if args.stop_grace < 0 or args.sigterm_window <= 0:
        parser.error("--stop-grace must be >= 0 and --sigterm-window > 0")
    return args


def main() -> None:
    args = parse_args()
    # SIGTERM unwinds like Ctrl-C, so workers, servers and the database are cleaned up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    command = "python scripts/bench/peers_cpu.py " + shlex.join(sys.argv[1:])
    load_before = os.getloadavg()
    outcomes, versions = measure(args)
    facts = common.machine(args.dsn)
    versions = {"pg-supervisor": ours_version(), "Python": facts["python"],
                "PostgreSQL": facts["postgresql"], **versions}
    print(f"Command: `{command.strip()}`")
    print(f"Machine: {facts['cpu']}, nproc {os.cpu_count()}, {facts['memory']}, "
          f"{facts['os']}")
    print(f"Load average before / after: {' '.join(f'{x:.2f}' for x in load_before)} / "
          f"{facts['load']}")
    print("Versions: " + "; ".join(f"{k} {v}" for k, v in versions.items()))
    notes = []
    if "cpu" in args.parts or "noop" in args.parts:
        notes.append(f"medians of {args.rounds} interleaved round(s)")
    if "cpu" in args.parts:
        notes.append(f"{args.cpu_seconds:g} CPU-seconds per row; efficiency = the Pool's "
                     "time / the system's (its own time in brackets)")
    if "noop" in args.parts:
        notes.append("no-op: jobs/s from worker start to the last completion")
    if "sigterm" in args.parts:
        notes.append(f"SIGTERM: stop grace {args.stop_grace:g} s, job "
                     f"{args.stop_grace + 10:g} s, restart window {args.sigterm_window:g} s")
    text = "; ".join(notes)
    print(text[:1].upper() + text[1:] + "\n")
    print(table(outcomes, args.lengths, args.noop_jobs))
    duels = head_to_head(outcomes, [f"cpu{n}" for n in args.lengths])
    if duels:
        print("\nRound by round, ours against each peer (rounds ours was faster; on a "
              "machine whose speed drifts, a paired count says more than two medians):")
        print("\n".join(duels))


def head_to_head(outcomes: list[Outcome], parts: list[str]) -> list[str]:
    """For each part, how many of the interleaved rounds ours finished before each peer
    (the two ran back to back in each round, so drift in the machine's speed falls on
    both)."""
    ours = next((o for o in outcomes if o.system.key == "ours"), None)
    if ours is None:
        return []
    lines = []
    for part in parts:
        mine = ours.seconds.get(part, [])
        counts = []
        for peer in outcomes:
            theirs = peer.seconds.get(part, [])
            if peer is ours or peer.system.key in REFERENCES or not theirs:
                continue
            if len(theirs) != len(mine):
                continue  # a failed round: no pairing
            won = sum(a < b for a, b in zip(mine, theirs, strict=True))
            counts.append(f"{peer.system.key} {won}/{len(mine)}")
        if counts:
            lines.append(f"- {part.removeprefix('cpu')} ms: " + ", ".join(counts))
    return lines


if __name__ == "__main__":
    main()
