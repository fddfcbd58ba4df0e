"""What the per-minute history costs the no-op drain: this checkout against a copy of
it with the maintenance leader's roll-up and depth sample taken out, interleaved.

The roll-up only adds up minutes that closed 30 s ago, so a short drain never gives it
work: each run drains ``--jobs`` no-op jobs (600,000 by default: about three minutes here)
with ``supervisor run -n 2 --burst`` at defaults, start-up included, on a database
its own code migrated; the "on" runs report how many jobs their leader rolled up while
draining. Rounds alternate so load from elsewhere falls on both alike; the report is
the median of the rounds and the load average before and after.

Usage: python scripts/bench/rollup_cost.py [--jobs 600000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common
import efficiency

DATABASE = "supervisor_bench_rollup_cost"
ROLL_CALLS = (
    "        store.roll_up()  # the per-minute history of finished jobs (dashboard charts)\n"
    "        store.sample_depth()  # and each queue's depth, once a minute")


def without_rollup(into: Path) -> Path:
    """A copy of this checkout's HEAD in ``into`` whose leader neither rolls up nor
    samples (the only difference)."""
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=common.ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    path = into / "supervisor" / "engine" / "maintenance.py"
    text = path.read_text()
    if ROLL_CALLS not in text:
        raise SystemExit("rollup_cost: the roll-up calls moved; update ROLL_CALLS")
    path.write_text(text.replace(ROLL_CALLS, "        pass  # no roll-up, no depth sample"))
    return into


def rolled(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT coalesce(sum(completed), 0) FROM supervisor.job_minutes"
                           ).fetchone()
        conn.execute("TRUNCATE supervisor.job_minutes, supervisor.queue_minutes")
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=600_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory(prefix="rollup-off-") as tmp:
        codes = {"on": str(common.ROOT), "off": str(without_rollup(Path(tmp)))}
        dsns = {name: common.scratch_database_for(args.dsn, f"{DATABASE}_{name}", code)
                for name, code in codes.items()}
        rates: dict[str, list[float]] = {name: [] for name in codes}
        try:
            for _ in range(args.rounds):
                for name, code in codes.items():
                    os.environ["BENCH_CODE"] = code
                    rolled(dsns[name])
                    rates[name].append(efficiency.noop_default(dsns[name], args.jobs))
                    print(f"  {name}: {rates[name][-1]:,.0f} jobs/s, rolled up while "
                          f"draining: {rolled(dsns[name]):,} jobs", flush=True)
        finally:
            os.environ.pop("BENCH_CODE", None)
            for name in codes:
                common.drop_database(args.dsn, f"{DATABASE}_{name}")
    on, off = common.median(rates["on"]), common.median(rates["off"])
    print(f"no-op x {args.jobs:,}, -n 2 defaults: roll-up on {on:,.0f} jobs/s, off "
          f"{off:,.0f} jobs/s, on/off {on / off:.3f}")
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
