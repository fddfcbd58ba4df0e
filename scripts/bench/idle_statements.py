"""What an idle supervisor asks the database each second (issue 43), by statement.

A scratch database (one per checkout: each migrates its own) with ``log_statement =
'all'`` set on it alone; ``supervisor run -n 2`` with no jobs for ``--seconds``; then
the server's log lines of that database are sorted into what each statement is for.
The log is read from ``--log`` (this machine's Debian cluster by default): the server
must log to a file this process can read, with ``%d`` in ``log_line_prefix``.

    python scripts/bench/idle_statements.py --seconds 30 --code /work/wt/before /work/main
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import psycopg
from common import DEFAULT_DSN, ROOT, drop_database, scratch_database_for, supervisor_cmd

# (label, pattern found in the statement): the first that matches names it.
KINDS = (
    ("global limits (queue_limits)", "FROM supervisor.queue_limits"),
    ("paused kinds (kind_pauses)", "FROM supervisor.kind_pauses"),
    ("promote due jobs", "SET state = 'available'"),
    ("which queues hold work", "unnest("),
    ("when the next job for later is due", "min(run_at)"),
    ("paused queues", "FROM supervisor.queues"),
    ("transaction control", re.compile(r"^(BEGIN|COMMIT|ROLLBACK)")),
)
OTHER = "everything else (maintenance, the holder look, registry)"
_STATEMENT = re.compile(r"LOG:  (?:statement|execute [^:]*): (.*)", re.S)
_ENTRY = re.compile(r"\n(?=\d{4}-\d\d-\d\d )")


def classify(statement: str) -> str:
    """What a logged statement is for."""
    for label, pattern in KINDS:
        if isinstance(pattern, str):
            if pattern in statement:
                return label
        elif pattern.search(statement):
            return label
    return OTHER


def _settled(log: Path, quiet: float = 0.3, limit: float = 10.0) -> None:
    """Return once the server's log has stopped growing for ``quiet`` seconds (its
    collector writes the run's last statements after the run ended), at most ``limit``."""
    size, since, give_up = log.stat().st_size, time.monotonic(), time.monotonic() + limit
    while time.monotonic() < give_up:
        time.sleep(0.05)
        now_size = log.stat().st_size
        if now_size != size:
            size, since = now_size, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return


def census(base_dsn: str, code: Path, seconds: float, log: Path) -> Counter[str]:
    """Statements by what they are for, of one idle ``supervisor run -n 2`` of ``code``."""
    name = "bench_idle_statements"
    dsn = scratch_database_for(base_dsn, name, str(code))
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" SET log_statement = \'all\'')
    start = log.stat().st_size
    env = dict(os.environ, SUPERVISOR_DSN=dsn,
               PYTHONPATH=os.pathsep.join([str(code / "scripts"), str(code)]))
    proc = subprocess.Popen(supervisor_cmd("-n", "2"), env=env, cwd=str(code),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(seconds)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    _settled(log)
    counts: Counter[str] = Counter()
    with log.open("rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    # An entry is its first line and the tab-indented lines of a statement that follow.
    for entry in _ENTRY.split(text):
        if f"@{dbname} " not in entry.split("\n", 1)[0]:
            continue
        found = _STATEMENT.search(entry)
        if found:
            counts[classify(found.group(1))] += 1
    drop_database(base_dsn, name)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--log", type=Path,
                        default=Path("/var/log/postgresql/postgresql-15-main.log"))
    parser.add_argument("--code", type=Path, nargs="+", default=[ROOT])
    args = parser.parse_args()
    results = {str(code): census(args.dsn, code, args.seconds, args.log)
               for code in args.code}
    labels = [label for label, _ in KINDS] + [OTHER]
    print("| statements per second | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for label in labels:
        print(f"| {label} | " + " | ".join(
            f"{counts[label] / args.seconds:.2f}" for counts in results.values()) + " |")
    print("| all | " + " | ".join(
        f"{sum(counts.values()) / args.seconds:.2f}" for counts in results.values()) + " |")


if __name__ == "__main__":
    main()
