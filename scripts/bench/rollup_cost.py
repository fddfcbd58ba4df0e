"""What the per-minute history costs the no-op drain: this checkout against a copy of
it with the maintenance leader's roll-up and depth sample taken out (its history
connection is then never opened either), interleaved.

The roll-up only adds up minutes that closed 30 s ago, so a short drain never gives it
work: each run drains ``--jobs`` no-op jobs (600,000 by default: about three minutes here)
with ``supervisor run -n 2 --burst`` at defaults, start-up included, on a database
its own code migrated; the "on" runs report how many jobs their leader rolled up while
draining. Rounds alternate, each starting with the next checkout, so load from
elsewhere falls on all alike; the report is the median of the rounds, with the load
average after each run.

``--before COMMIT`` adds a third checkout to each round: that commit as it was (say, the
last whose leader rolled up inside its loop), so a change is measured against both.

Usage: python scripts/bench/rollup_cost.py [--jobs 600000] [--rounds 3] [--before COMMIT]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common
import efficiency

DATABASE = "supervisor_bench_rollup_cost"
ROLL_CALLS = (
    "        if self.history is not None:\n"
    "            # The per-minute history (dashboard charts): sent, not waited for.\n"
    "            self.history.request()\n")


def checkout(commit: str, into: Path) -> Path:
    """A copy of ``commit`` of this repository in ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", commit], cwd=common.ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def without_rollup(into: Path) -> Path:
    """A copy of this checkout's HEAD in ``into`` whose leader neither rolls up nor
    samples (the only difference)."""
    checkout("HEAD", into)
    path = into / "supervisor" / "engine" / "maintenance.py"
    text = path.read_text()
    if ROLL_CALLS not in text:
        raise SystemExit("rollup_cost: the roll-up calls moved; update ROLL_CALLS")
    path.write_text(text.replace(ROLL_CALLS, "        # no roll-up, no depth sample\n"))
    return into


def rolled(dsn: str) -> int:
    """The jobs rolled up since the last call; the tables emptied and the mark set to
    this minute, as a leader that kept up would have it when a drain begins (left where
    the last run put it, the next run's leader would first roll up the minutes the other
    checkouts ran in, and reach this run's jobs late or never)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT coalesce(sum(completed), 0) FROM supervisor.job_minutes"
                           ).fetchone()
        conn.execute("TRUNCATE supervisor.job_minutes, supervisor.queue_minutes")
        conn.execute("UPDATE supervisor.rollup_mark SET rolled_until = date_trunc('minute', now())")
    return int(row[0]) if row else 0


class HistoryCpu(threading.Thread):
    """The CPU time of the supervisor's history connection's backend while a run lasts
    (read from ``/proc``, so the database must run on this machine): what the roll-up
    and the depth sample cost the server, apart from the drain. Polled a few times a
    second, in every run alike; the last reading before the backend ends is kept."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.seconds: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.done.wait(0.25):
                pids = [row[0] for row in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND application_name LIKE 'supervisor %% history'")]
                for pid in pids:
                    try:
                        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    except (OSError, IndexError):
                        continue
                    self.seconds[pid] = (int(fields[11]) + int(fields[12])) / tick

    def stop(self) -> float:
        """Seconds of CPU in all."""
        self.done.set()
        self.join()
        return sum(self.seconds.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=600_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", metavar="COMMIT",
                        help="also run this commit as it was, in each round")
    args = parser.parse_args()
    print(f"load before: {load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="rollup-off-") as tmp:
        codes = {"on": str(common.ROOT), "off": str(without_rollup(Path(tmp) / "off"))}
        if args.before:
            codes["before"] = str(checkout(args.before, Path(tmp) / "before"))
        dsns = {name: common.scratch_database_for(args.dsn, f"{DATABASE}_{name}", code)
                for name, code in codes.items()}
        rates: dict[str, list[float]] = {name: [] for name in codes}
        try:
            names = list(codes)
            for turn in range(args.rounds):
                # Each round starts with the next checkout: load from elsewhere that
                # comes and goes with the time of a round falls on each in turn.
                for name in names[turn % len(names):] + names[:turn % len(names)]:
                    code = codes[name]
                    os.environ["BENCH_CODE"] = code
                    rolled(dsns[name])
                    watch = HistoryCpu(dsns[name])
                    watch.start()
                    rates[name].append(efficiency.noop_default(dsns[name], args.jobs))
                    cpu = watch.stop()
                    drain = args.jobs / rates[name][-1]
                    print(f"  {name}: {rates[name][-1]:,.0f} jobs/s, rolled up while "
                          f"draining: {rolled(dsns[name]):,} jobs; history backend CPU "
                          f"{cpu:.2f} s ({cpu / (drain * (os.cpu_count() or 1)):.2%} of "
                          f"the machine over the drain); load {load()}", flush=True)
        finally:
            os.environ.pop("BENCH_CODE", None)
            for name in codes:
                common.drop_database(args.dsn, f"{DATABASE}_{name}")
    on, off = common.median(rates["on"]), common.median(rates["off"])
    print(f"no-op x {args.jobs:,}, -n 2 defaults: roll-up on {on:,.0f} jobs/s, off "
          f"{off:,.0f} jobs/s, on/off {on / off:.3f}")
    if args.before:
        before = common.median(rates["before"])
        print(f"  {args.before}: {before:,.0f} jobs/s, before/off {before / off:.3f}")
    print(f"load after: {load()}", flush=True)


def load() -> str:
    """The load average, as uptime shows it."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
