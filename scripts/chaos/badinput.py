"""The bad-input run: what users and producers get wrong, thrown at the real commands.

Usage::

    /work/venv/bin/python scripts/chaos/badinput.py

Starts a private embedded PostgreSQL, then tries: malformed ``--args``, args that are
JSON but not an object (CLI and plain SQL), a NUL in args, an over-long queue name, an
unreachable DSN with a password in it (``enqueue`` and ``run``); in a running supervisor:
an unknown kind (enqueued with SQL), a result over the 1 MiB cap, an unserializable
result, a result with a NUL, args that do not fit the handler; and queue names made of
quotes and semicolons served with ``supervisor run -q``. Prints one table row per case
(what was done, what was expected, what happened); exits 1 if any case failed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import orjson
import psycopg

from scripts.chaos.procs import APP, SupervisorProc, child_env, migrate, supervisor_command
from scripts.chaos.runlog import read_runs
from shared.enqueue import enqueue, enqueue_many

HOSTILE_QUEUES = ("q'; DROP TABLE supervisor.jobs; --", 'we"ird\\queue;$$ --')
SECRET = "s3cret-pw"
UNREACHABLE_DSN = f"postgresql://chaos:{SECRET}@127.0.0.1:1/nowhere?connect_timeout=2"


@dataclass
class Case:
    """One bad input: what was done, what should happen, what did."""

    name: str
    done: str
    expected: str
    happened: str
    ok: bool


@dataclass
class Cli:
    """A finished ``supervisor`` command."""

    code: int
    out: str
    err: str

    def one_clean_line(self) -> bool:
        """Stderr is exactly one line and no traceback."""
        return len(self.err.strip().splitlines()) == 1 and "Traceback" not in self.err


def cli(dsn: str, *args: str, timeout: float = 60.0) -> Cli:
    """Run ``supervisor ARGS...`` against ``dsn``."""
    proc = subprocess.run(supervisor_command(*args), env=child_env(dsn), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return Cli(proc.returncode, proc.stdout, proc.stderr)


def _rows(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0]


def _job(dsn: str, job_id: int) -> dict:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute("SELECT state, attempt, errors, result IS NOT NULL AS has_result "
                           "FROM supervisor.jobs WHERE id = %s", (job_id,))
        row = cur.fetchone()
        return dict(zip([d.name for d in cur.description], row, strict=True)) if row else {}


def _cli_case(dsn: str, name: str, args: list[str], code: int, extra: Callable[[Cli], bool]
              = lambda r: True, expected: str = "") -> Case:
    before = _rows(dsn)
    result = cli(dsn, *args)
    stored = _rows(dsn) - before
    ok = result.code == code and result.one_clean_line() and stored == 0 and extra(result)
    shown = " ".join(a if len(a) < 60 else a[:40] + "..." for a in args)
    happened = (f"exit {result.code}, {len(result.err.strip().splitlines())} line(s): "
                f"{result.err.strip()[:160]!r}; rows added: {stored}")
    return Case(name, f"`supervisor {shown}`",
                expected or f"exit {code}, one line, no traceback, nothing stored", happened, ok)


def cli_cases(dsn: str) -> list[Case]:
    """Malformed input on the command line, and a database that is not there."""
    cases = [
        _cli_case(dsn, "malformed --args", ["enqueue", "chaos_noop", "--args", "{bad"], 2),
        _cli_case(dsn, "--args a JSON array", ["enqueue", "chaos_noop", "--args", "[1, 2]"], 2),
        _cli_case(dsn, "--args a JSON string", ["enqueue", "chaos_noop", "--args", '"text"'], 2),
        _cli_case(dsn, "NUL in --args", ["enqueue", "chaos_noop", "--args", '{"s": "a\\u0000b"}'],
                  2),
        _cli_case(dsn, "queue name over 255 chars",
                  ["enqueue", "chaos_noop", "--queue", "q" * 256], 2),
        _cli_case(dsn, "unreachable DSN (enqueue)",
                  ["enqueue", "chaos_noop", "--dsn", UNREACHABLE_DSN], 1,
                  lambda r: SECRET not in r.err + r.out,
                  f"exit 1, one line, no traceback, password {SECRET!r} not printed"),
        _cli_case(dsn, "unreachable DSN (run)",
                  ["run", "--app", APP, "-n", "1", "--burst", "--dsn", UNREACHABLE_DSN], 1,
                  lambda r: SECRET not in r.err + r.out,
                  f"exit 1, one line, no traceback, password {SECRET!r} not printed"),
    ]
    before = _rows(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO supervisor.jobs (kind, args) VALUES ('chaos_noop', '[1]')")
        happened = "accepted"
    except psycopg.errors.CheckViolation as exc:
        happened = f"refused: {str(exc).splitlines()[0]}"
    cases.append(Case("SQL args a JSON array", "`INSERT ... (kind, args) VALUES (..., '[1]')`",
                      "refused by the table's CHECK, nothing stored",
                      f"{happened}; rows added: {_rows(dsn) - before}",
                      happened.startswith("refused") and _rows(dsn) == before))
    return cases


def _run_until(dsn: str, workdir: Path, ids: list[int], args: list[str],
               timeout: float = 60.0) -> tuple[SupervisorProc, bool]:
    """Start a supervisor (not in burst mode) and wait until every job of ``ids`` is
    final; returns it still running, and whether they all finished in time."""
    sup = SupervisorProc(dsn, workdir / "runs.log", workdir / f"supervisor-{time.time_ns()}.log",
                         args)
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline and sup.alive():
            left = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE id = ANY(%s) AND "
                                "state NOT IN ('completed', 'discarded')", (ids,)).fetchone()[0]
            if left == 0:
                return sup, True
            time.sleep(0.05)
    return sup, False


def worker_cases(dsn: str, workdir: Path) -> list[Case]:
    """Jobs a handler cannot finish properly, in one supervisor with one child, followed
    by ordinary jobs that must still complete in that same child."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        unknown = conn.execute("INSERT INTO supervisor.jobs (kind, args) VALUES "
                               "('chaos_no_such_kind', '{\"x\": 1}') RETURNING id").fetchone()[0]
        jobs = {
            "huge": enqueue("chaos_huge_result", {"size": 2 * 1024 * 1024}, max_attempts=1,
                            conn=conn),
            "unserializable": enqueue("chaos_unserializable", {}, max_attempts=1, conn=conn),
            "nul": enqueue("chaos_nul_result", {}, max_attempts=1, conn=conn),
            "missing": enqueue("chaos_typed", {"a": 1}, conn=conn),
            "extra": enqueue("chaos_typed", {"a": 1, "b": 2, "c": 3}, conn=conn),
            "wrong": enqueue("chaos_typed", {"x": "y"}, conn=conn),
        }
        after = enqueue_many("chaos_noop", [{"n": i} for i in range(20)], conn=conn)
    sup, finished = _run_until(dsn, workdir, [*jobs.values(), *after],
                               ["-n", "1", "--lease-ttl", "5"])
    alive = sup.alive()
    sup.terminate()
    code = sup.wait(30)
    sup.close()
    runs, _ = read_runs(workdir / "runs.log")
    pids = {r.pid for i in [*jobs.values(), *after] for r in runs.get(i, [])}
    rows = {name: _job(dsn, i) for name, i in jobs.items()}
    done_after = sum(_job(dsn, i).get("state") == "completed" for i in after)
    survived = f"{len(pids)} child pid(s) ran all of them"

    def first_error(name: str) -> dict:
        errors = rows[name].get("errors") or [{}]
        return errors[0]

    def result_case(name: str, title: str, done: str, expected_state: str) -> Case:
        row, err = rows[name], first_error(name)
        ok = (row.get("state") == expected_state and err.get("kind") == "result"
              and len(pids) == 1 and not row.get("has_result"))
        return Case(title, done, f"{expected_state} with kind 'result', the child survives",
                    f"{row.get('state')}, {err.get('kind')}: {str(err.get('message'))[:90]!r}; "
                    f"{survived}", ok)

    cases = [
        result_case("huge", "result over the 1 MiB cap", "handler returns 2 MiB of text",
                    "discarded"),
        result_case("unserializable", "unserializable result", "handler returns a set",
                    "discarded"),
        result_case("nul", "NUL in a result", "handler returns 'a\\x00b' (jsonb refuses it)",
                    "discarded"),
    ]
    for name, args in (("missing", "{a: 1}"), ("extra", "{a, b, c}"), ("wrong", "{x: 'y'}")):
        row, err = rows[name], first_error(name)
        cases.append(Case(f"args not fitting the handler ({name})",
                          f"`chaos_typed(a, b)` enqueued with {args}",
                          "discarded at once with kind 'binding'",
                          f"{row.get('state')} after attempt {row.get('attempt')}, "
                          f"{err.get('kind')}: {str(err.get('message'))[:90]!r}",
                          row.get("state") == "discarded" and row.get("attempt") == 1
                          and err.get("kind") == "binding"))
    urow = _job(dsn, unknown)
    cases.append(Case("unknown kind", "`INSERT ... VALUES ('chaos_no_such_kind', ...)` while a "
                      "supervisor runs", "not claimed, stays available; the supervisor keeps "
                      "running and exits 0 on SIGTERM",
                      f"{urow.get('state')}, attempt {urow.get('attempt')}; supervisor alive "
                      f"after the rest finished: {alive}; exit {code}",
                      urow.get("state") == "available" and urow.get("attempt") == 0 and alive
                      and code == 0))
    cases.append(Case("batch not wedged", "20 no-op jobs enqueued after the bad ones",
                      "all completed, same child", f"{done_after}/20 completed; {survived}; "
                      f"all finished in time: {finished}",
                      done_after == 20 and finished and len(pids) == 1))
    return cases


def queue_name_cases(dsn: str, workdir: Path) -> list[Case]:
    """Queue names made of SQL punctuation, enqueued and served with ``run -q``."""
    cases = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        bystanders = enqueue_many("chaos_noop", [{"n": 1}] * 5, queue="bystander", conn=conn)
    for name in HOSTILE_QUEUES:
        before = _rows(dsn)
        made = cli(dsn, "enqueue", "chaos_noop", "--queue", name, "--args", '{"n": 7}')
        ids = [int(made.out.strip())] if made.code == 0 else []
        with psycopg.connect(dsn, autocommit=True) as conn:
            ids += enqueue_many("chaos_noop", [{"n": i} for i in range(10)], queue=name,
                                conn=conn)
        burst = cli(dsn, "run", "--app", APP, "-n", "1", "--burst", "-q", name, timeout=90)
        status = cli(dsn, "status")
        with psycopg.connect(dsn, autocommit=True) as conn:
            states = dict(conn.execute(
                "SELECT state, count(*) FROM supervisor.jobs WHERE id = ANY(%s) GROUP BY state",
                (ids,)).fetchall())
            queues = [r[0] for r in conn.execute(
                "SELECT DISTINCT queue FROM supervisor.jobs WHERE id = ANY(%s)", (ids,))]
            untouched = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE id = ANY(%s) "
                                     "AND state = 'available'", (bystanders,)).fetchone()[0]
        rows_now = _rows(dsn)
        ok = (made.code == 0 and burst.code == 0 and states == {"completed": 11}
              and queues == [name] and rows_now == before + 11 and untouched == 5
              and status.code == 0 and name in status.out)
        cases.append(Case(f"queue name {name!r}",
                          "`enqueue --queue NAME` + enqueue_many, then `run --burst -q NAME`, "
                          "then `status`",
                          "11 jobs completed in that queue, no row lost, other queues "
                          "untouched, status lists it",
                          f"enqueue exit {made.code}; run exit {burst.code}; states "
                          f"{orjson.dumps(states).decode()}; rows {before} -> {rows_now}; "
                          f"bystanders still available {untouched}/5; status exit {status.code}",
                          ok))
    return cases


def run_all(dsn: str, workdir: Path) -> list[Case]:
    """Every case, on a migrated database at ``dsn``."""
    return cli_cases(dsn) + worker_cases(dsn, workdir) + queue_name_cases(dsn, workdir)


def table(cases: list[Case]) -> str:
    """The cases as a Markdown table."""
    lines = ["| case | what was done | expected | what happened | ok |",
             "|---|---|---|---|---|"]
    for c in cases:
        cells = [c.name, c.done, c.expected, c.happened, "yes" if c.ok else "**NO**"]
        lines.append("| " + " | ".join(x.replace("|", "\\|").replace("\n", " ")
                                       for x in cells) + " |")
    return "\n".join(lines)


def main() -> int:
    """Command-line entry point; returns the exit status."""
    import shutil
    import tempfile

    from scripts.chaos.procs import private_server

    workdir = Path(tempfile.mkdtemp(prefix="chaos-badinput-"))
    server = private_server()
    try:
        migrate(server.dsn)
        cases = run_all(server.dsn, workdir)
    finally:
        server.close()
    print(table(cases))
    failed = [c for c in cases if not c.ok]
    if failed:
        print(f"{len(failed)} case(s) failed; logs in {workdir}")
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
