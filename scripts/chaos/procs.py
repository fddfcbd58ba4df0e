"""Processes of a chaos run: the private PostgreSQL and the ``supervisor run`` parents.

The database is an embedded server in a temporary directory (``tests/pgharness.py``), so
restarting it harms nobody else using the machine's PostgreSQL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = "scripts.chaos.handlers"


def private_server():
    """A started private embedded PostgreSQL (``.dsn``, ``.restart()``, ``.close()``)."""
    tests_dir = str(ROOT / "tests")
    if tests_dir not in sys.path:
        sys.path.insert(0, tests_dir)
    import pgharness

    return pgharness.EmbeddedServer()


def migrate(dsn: str) -> None:
    """Create the schema in the database at ``dsn``."""
    import psycopg

    from shared.migrate import migrate as apply

    with psycopg.connect(dsn, autocommit=True) as conn:
        apply(conn)


def child_env(dsn: str, runlog: Path | None = None) -> dict[str, str]:
    """The environment for ``supervisor`` subprocesses: the DSN, the project on the path,
    and where handlers record their runs."""
    env = dict(os.environ)
    env.update({"SUPERVISOR_DSN": dsn, "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                            env.get("PYTHONPATH")]))})
    env.pop("DATABASE_URL", None)
    if runlog is not None:
        env["CHAOS_RUNLOG"] = str(runlog)
    return env


def supervisor_command(*args: str) -> list[str]:
    """The argv of ``supervisor ARGS...`` run with this interpreter."""
    return [sys.executable, "-m", "supervisor", *args]


class SupervisorProc:
    """One ``supervisor run`` parent; its stderr goes to ``log_path``."""

    def __init__(self, dsn: str, runlog: Path, log_path: Path, run_args: list[str]) -> None:
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            supervisor_command("run", "--app", APP, *run_args), env=child_env(dsn, runlog),
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, cwd=str(log_path.parent))
        self.killed = False

    @property
    def pid(self) -> int:
        """The parent's pid."""
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the parent is still running."""
        return self.proc.poll() is None

    def children(self) -> list[int]:
        """Pids of the parent's live children."""
        try:
            text = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def busy_children(self) -> list[tuple[int, str]]:
        """``(pid, title)`` of children whose title says they run a job."""
        busy = []
        for pid in self.children():
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if " job " in title:
                busy.append((pid, title.strip()))
        return busy

    def kill(self) -> None:
        """SIGKILL the parent (its children follow by PDEATHSIG)."""
        self.killed = True
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def terminate(self) -> None:
        """Ask for a graceful drain (SIGTERM)."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if it is still running after ``timeout`` seconds."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        """Make sure the process is gone and its log file closed."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._log.close()

    def log_text(self) -> str:
        """Everything the process wrote so far."""
        return self.log_path.read_text(errors="replace")
