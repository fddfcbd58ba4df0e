"""Driving a real ``supervisor run`` process from a test.

Conditions are awaited by polling the database or the run log with a deadline: the
event (a row's state, a line in the log) is what the test waits for, never a fixed sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import psycopg

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent


def wait_until(predicate: Callable[[], object], timeout: float = 20.0,
               interval: float = 0.02, what: str = "condition") -> object:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class Supervisor:
    """A ``supervisor run`` subprocess on a test database."""

    def __init__(self, dsn: str, *args: str, log_path: Path | None = None,
                 env: dict[str, str] | None = None, app: str = "e2e_handlers",
                 wrapper: tuple[str, ...] = ()) -> None:
        self.log_path = log_path
        full_env = dict(os.environ)
        full_env.update({
            "SUPERVISOR_DSN": dsn,
            "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), str(ROOT)]),
            "PYTHONUNBUFFERED": "1",
        })
        if log_path is not None:
            full_env["E2E_LOG"] = str(log_path)
        full_env.update(env or {})
        # ``wrapper``: a command prefix that execs the rest (it moves the process into a
        # test's cgroup, say); the pid stays the supervisor's.
        self.args = [*wrapper, sys.executable, "-m", "supervisor", "run", "--app", app, *args]
        # stderr goes to a file so a test can wait for a log line while the process runs.
        self._err_file = tempfile.NamedTemporaryFile(prefix="sv-", suffix=".err")  # noqa: SIM115
        self.proc = subprocess.Popen(self.args, env=full_env, stdout=subprocess.PIPE,
                                     stderr=self._err_file, text=True, cwd=str(TESTS_DIR))
        self.out = ""

    @property
    def err(self) -> str:
        """Everything the supervisor wrote to stderr so far."""
        with open(self._err_file.name, errors="replace") as f:
            return f.read()

    def wait_for_log(self, text: str, timeout: float = 20.0) -> None:
        """Wait until ``text`` appears on the supervisor's stderr."""
        wait_until(lambda: text in self.err, timeout=timeout, what=repr(text))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60.0) -> int:
        """Wait for exit; returns the exit code and keeps stdout/stderr."""
        try:
            self.out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.out, _ = self.proc.communicate()
            raise AssertionError(f"supervisor did not exit within {timeout} s:\n{self.err}")
        return self.proc.returncode

    def children(self) -> list[int]:
        """Pids of this supervisor's live children."""
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        try:
            return [int(p) for p in path.read_text().split()]
        except FileNotFoundError:
            return []

    def stop(self) -> None:
        """Make sure the process is gone (test teardown)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.communicate(timeout=10)


def read_log(path: Path) -> list[dict]:
    """Every record the handlers wrote."""
    if not path.exists():
        return []
    data = path.read_bytes()
    # A handler may be appending right now: a last line without its newline is not done.
    lines = data.split(b"\n")[:-1]
    return [orjson.loads(line) for line in lines if line.strip()]


def job_row(dsn: str, job_id: int) -> dict:
    """One row of supervisor.jobs as a dict."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute("SELECT * FROM supervisor.jobs WHERE id = %s", (job_id,))
        names = [d.name for d in cur.description]
        row = cur.fetchone()
        return dict(zip(names, row, strict=True)) if row else {}


def state_counts(dsn: str) -> dict[str, int]:
    """Jobs per state."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return dict(conn.execute(
            "SELECT state, count(*) FROM supervisor.jobs GROUP BY state").fetchall())


def run_burst(dsn: str, *args: str, log_path: Path | None = None, timeout: float = 60.0,
              env: dict[str, str] | None = None, app: str = "e2e_handlers",
              discards_ok: bool = True) -> Supervisor:
    """Run ``supervisor run --burst`` to completion; asserts exit code 0. With
    ``discards_ok`` (the default, for the tests written before a burst's discards had an
    exit code of their own) it passes ``--discards-ok``."""
    flags = ("--burst", "--discards-ok") if discards_ok else ("--burst",)
    sup = Supervisor(dsn, *flags, *args, log_path=log_path, env=env, app=app)
    code = sup.wait(timeout)
    assert code == 0, f"exit {code}\nstderr:\n{sup.err}"
    return sup


def wait_all(sups: list[Supervisor], timeout: float = 90.0) -> None:
    """Wait for every supervisor in ``sups`` to exit 0 (asserted, with its stderr); any
    still running when one fails is stopped."""
    try:
        for sup in sups:
            assert sup.wait(timeout) == 0, sup.err
    finally:
        for sup in sups:
            sup.stop()
