"""CPU efficiency as ``efficiency.py`` measures it, but interleaved: each round runs the
Pool, then every checkout, so load that comes and goes on a shared machine falls on all
of them alike (``efficiency.py`` runs each checkout's runs back to back).

Usage: python scripts/bench/efficiency_interleaved.py LENGTHS_MS CODE [CODE ...]
       e.g. ``100,20 /tmp/before .`` (``ROUNDS=3`` by default)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import bench_run
import common
import efficiency

DATABASE = "supervisor_bench_interleaved"


def main() -> None:
    lengths = [int(x) for x in sys.argv[1].split(",")]
    codes = [str(Path(c).resolve()) for c in sys.argv[2:]]
    rounds = int(os.environ.get("ROUNDS", "3"))
    # Each checkout runs on a database its own code migrated (see scratch_database_for).
    dsns = {code: common.scratch_database_for(common.DEFAULT_DSN, f"{DATABASE}_{i}", code)
            for i, code in enumerate(codes)}
    per_ms = efficiency.iterations_per_ms()
    print("load before", " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    try:
        for length in lengths:
            tasks = [round(per_ms * length)] * round(10 * 1000 / length)
            times: dict[str, list[float]] = {"pool": [], **{c: [] for c in codes}}
            for _ in range(rounds):
                times["pool"].append(bench_run.cpu_through_multiprocessing(tasks))
                for code in codes:
                    os.environ["BENCH_CODE"] = code
                    times[code].append(efficiency.ours(dsns[code], tasks))
            pool = common.median(times["pool"])
            print(f"{length} ms x {len(tasks)}: Pool {pool:.2f} s; " + "; ".join(
                f"{Path(c).name} {common.median(times[c]):.2f} s, efficiency "
                f"{pool / common.median(times[c]):.2f}" for c in codes), flush=True)
    finally:
        os.environ.pop("BENCH_CODE", None)
        for i in range(len(codes)):
            common.drop_database(common.DEFAULT_DSN, f"{DATABASE}_{i}")
    print("load after", " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)


if __name__ == "__main__":
    main()
