"""How long after exec `supervisor run` starts catching SIGTERM (the window in which a
SIGTERM to PID 1 is dropped). Polls /proc/<pid>/status SigCgt every millisecond.

    .venv/bin/python scripts/edges_sigterm_window.py DSN [runs]
"""

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIGTERM_BIT = 1 << (15 - 1)


def one(dsn: str) -> float:
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'tests'}:{ROOT}", SUPERVISOR_DSN=dsn)
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "supervisor", "run", "--app", "e2e_handlers",
                             "-n", "1"], env=env, cwd=ROOT / "tests",
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            caught = int(status.split("SigCgt:")[1].split()[0], 16)
            if caught & SIGTERM_BIT:
                return time.monotonic() - start
            time.sleep(0.001)
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    times = [one(sys.argv[1]) for _ in range(runs)]
    print(f"SIGTERM caught after: median {statistics.median(times) * 1000:.0f} ms, "
          f"min {min(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms ({runs} runs)")
