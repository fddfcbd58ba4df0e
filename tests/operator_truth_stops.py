"""One try of a stop sent twice at once, for ``tests/test_operator_truth_signals.py``
and ``scripts/stop_signal_tries.py``: two jobs run under a real ``supervisor run``, the
stop arrives (through a ``timeout`` wrapper, or as two SIGTERMs a few milliseconds
apart), and the try says whether the supervisor drained (the jobs finish where they
run, once the test lets them) or stopped at once (they were killed and go back)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
from e2e import ROOT, TESTS_DIR, wait_until

from shared.enqueue import enqueue

WRAPPED = "timeout"  # kill -TERM sent to `timeout 600 supervisor run ...`
TWICE = "twice"  # two SIGTERMs, ``gap`` seconds apart, sent to the supervisor itself


@dataclass(frozen=True)
class StopTry:
    """What one try came to."""

    drained: bool  # "draining" logged, and no "stopping now"
    completed: int  # of the two jobs, completed where they ran (attempt 1)
    exit_code: int
    err: str


def _started(dsn: str, ids: list[int]) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE id = ANY(%s) "
                            "AND state = 'running' AND attempted_at IS NOT NULL",
                            (ids,)).fetchone()
    return bool(rows and rows[0] == len(ids))


def stop_twice(dsn: str, how: str, workdir: Path, *, gap: float = 0.05,
               then_quit: bool = False) -> StopTry:
    """Two jobs run; the stop is sent ``how``; once "draining" is logged the jobs are
    let finish (or, ``then_quit``, SIGQUIT is sent first). Returns what happened."""
    gate = workdir / f"gate-{time.monotonic_ns()}"
    ids = [enqueue("e2e_wait_for", {"path": str(gate), "timeout": 60}, dsn=dsn)
           for _ in range(2)]
    env = dict(os.environ, SUPERVISOR_DSN=dsn, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(ROOT)]))
    command = [sys.executable, "-m", "supervisor", "run", "--app", "e2e_handlers", "-n", "2",
               "--grace", "60", "--poll-interval", "0.1"]
    if how == WRAPPED:
        command = ["timeout", "600", *command]
    with tempfile.NamedTemporaryFile(prefix="stop-", suffix=".err") as err_file:
        proc = subprocess.Popen(command, env=env, stderr=err_file, stdout=subprocess.DEVNULL,
                                cwd=str(TESTS_DIR))

        def err() -> str:
            return Path(err_file.name).read_text(errors="replace")

        try:
            wait_until(lambda: _started(dsn, ids), timeout=60, what="both jobs running")
            if how == WRAPPED:
                os.kill(proc.pid, signal.SIGTERM)  # timeout: to its child, then its group
            else:
                os.kill(proc.pid, signal.SIGTERM)
                time.sleep(gap)
                os.kill(proc.pid, signal.SIGTERM)
            wait_until(lambda: "draining" in err() or "stopping now" in err(), timeout=30,
                       what="the stop to be logged")
            if how == TWICE:
                time.sleep(0.3)  # the second SIGTERM has been handled by now, if ever
            if then_quit:
                os.kill(proc.pid, signal.SIGQUIT)
                wait_until(lambda: "stopping now" in err(), timeout=30, what="SIGQUIT")
            gate.touch()
            code = proc.wait(60)
        finally:
            gate.touch()
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        text = err()
    with psycopg.connect(dsn, autocommit=True) as conn:
        completed = conn.execute(
            "SELECT count(*) FROM supervisor.jobs WHERE id = ANY(%s) AND state = 'completed' "
            "AND attempt = 1", (ids,)).fetchone()[0]
        # What a stop-now put back must not run in the next try.
        conn.execute("DELETE FROM supervisor.jobs WHERE id = ANY(%s)", (ids,))
    return StopTry("draining" in text and "stopping now" not in text, completed, code, text)
