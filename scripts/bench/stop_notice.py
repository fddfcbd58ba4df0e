"""How soon a handler sees ``Stopping`` after SIGTERM (issue 28): a drain tells the jobs
that cannot finish within the grace at its start; the child's heartbeat thread reads the
notice at its next look (every 20 ms once the job has been seen to run 50 ms) and
signals the handler.

Each round: one sleeping and one spinning ``on_stop="raise"`` job running under
``supervisor run -n 2 --grace 10``, SIGTERM, and the time from the signal to each
handler's ``except Stopping`` (both clocks: ``time.time()`` on one machine).

    python scripts/bench/stop_notice.py --rounds 10
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from common import (
    cli,
    machine,
    median,
    reset,
    scratch_database,
    supervisor_cmd,
    supervisor_env,
)

from shared.enqueue import enqueue


def one_round(dsn: str) -> dict[str, float]:
    reset(dsn)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "probe.log"
        ids = {enqueue("run_until_told", {"busy": False}, queue="stopnote", dsn=dsn): "sleeping",
               enqueue("run_until_told", {"busy": True}, queue="stopnote", dsn=dsn): "spinning"}
        env = supervisor_env(dsn, BENCH_PROBE_LOG=str(log))
        proc = subprocess.Popen(supervisor_cmd("-n", "2", "--grace", "10", "-q", "stopnote"),
                                env=env, cwd=env["PYTHONPATH"].split(os.pathsep)[0],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            end = time.monotonic() + 60
            while (not log.exists() or log.read_text().count(" start ") < 2):
                if time.monotonic() > end:
                    raise SystemExit(f"jobs did not start:\n{proc.stderr.read()}")
                time.sleep(0.05)
            time.sleep(0.5)
            sent = time.time()
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        seen = {}
        for line in log.read_text().splitlines():
            job_id, event, at = line.split()
            if event == "stopping":
                seen[ids[int(job_id)]] = float(at) - sent
        return seen


def run(dsn: str, rounds: int = 10):
    db = scratch_database(dsn, "bench_stop_notice")
    facts = machine(dsn)
    delays: dict[str, list[float]] = {"sleeping": [], "spinning": []}
    for _ in range(rounds):
        for kind, delay in one_round(db).items():
            delays[kind].append(delay * 1000)
    yield "machine", f"{facts['cpu']}, load {facts['load']}"
    for kind, values in delays.items():
        yield (f"SIGTERM to Stopping, {kind} handler ({len(values)} of {rounds} seen)",
               f"median {median(values):.0f} ms, max {max(values):.0f} ms" if values
               else "never seen")


if __name__ == "__main__":
    cli(run, __doc__.splitlines()[0], rounds=10)
