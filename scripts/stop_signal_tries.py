"""Issue 47: a stop delivered twice must drain, not stop now. Runs ``tries`` tries each of
``kill -TERM`` sent to a ``timeout 600 supervisor run ...`` wrapper and of two SIGTERMs
50 ms apart sent to the supervisor, two jobs running each time, then one SIGQUIT try;
prints how many drained (both jobs completed where they ran, exit 0) and how many
stopped now. The database at DSN must be migrated; the jobs it adds are deleted.

    .venv/bin/python scripts/stop_signal_tries.py DSN [tries]
"""

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from operator_truth_stops import TWICE, WRAPPED, stop_twice  # noqa: E402


def main() -> int:
    dsn = sys.argv[1]
    tries = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    failed = 0
    with tempfile.TemporaryDirectory() as workdir:
        for how, label in ((WRAPPED, "kill -TERM to `timeout 600 supervisor run`"),
                           (TWICE, "two SIGTERMs 50 ms apart to the supervisor")):
            results = [stop_twice(dsn, how, Path(workdir), gap=0.05) for _ in range(tries)]
            drained = sum(r.drained and r.completed == 2 and r.exit_code == 0
                          for r in results)
            seen_twice = sum("the same stop" in r.err for r in results)
            print(f"{label}: {drained}/{tries} drained, {tries - drained} stopped now "
                  f"(second SIGTERM seen by the loop in {seen_twice})")
            failed += tries - drained
        quit_try = stop_twice(dsn, TWICE, Path(workdir), gap=0.05, then_quit=True)
        stopped = "stopping now" in quit_try.err and quit_try.completed == 0
        print(f"SIGQUIT after the two SIGTERMs: {'stopped now' if stopped else 'DID NOT stop'}")
    return 1 if failed or not stopped else 0


if __name__ == "__main__":
    sys.exit(main())
