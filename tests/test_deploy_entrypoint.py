"""The container image's contract, without a container runtime: docs/deploy/Dockerfile's
own ENTRYPOINT (tini, then ``supervisor run``) run as PID 1 of a fresh PID namespace
(``unshare --pid --fork --mount-proc``), stopped with the image's STOPSIGNAL, and its
HEALTHCHECK command run against a live supervisor.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from e2e import ROOT, TESTS_DIR, read_log, wait_until

from shared.enqueue import enqueue

DOCKERFILE = ROOT / "docs" / "deploy" / "Dockerfile"


def _instruction(name: str) -> str:
    """The (last) ``name`` instruction's argument text, continuation lines joined."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    found = re.findall(rf"^{name}\s+(.*)$", text, flags=re.MULTILINE)
    assert found, f"no {name} in {DOCKERFILE}"
    return found[-1].strip()


def _exec_form(name: str) -> list[str]:
    argv = json.loads(_instruction(name))
    assert isinstance(argv, list), f"{name} is not in exec form"
    return argv


def _local(argv: list[str]) -> list[str]:
    """The image's command line for this checkout: ``supervisor`` as this interpreter."""
    out: list[str] = []
    for arg in argv:
        out.extend([sys.executable, "-m", "supervisor"] if arg == "supervisor" else [arg])
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_dockerfile_runs_as_non_root_under_tini_and_stops_with_sigterm():
    """The promises the deployment guide makes about the image, read from the file."""
    entry = _exec_form("ENTRYPOINT")
    assert entry[:4] == ["tini", "--", "supervisor", "run"], entry
    assert "-g" not in entry[:2]  # the supervisor stops its own children
    assert _instruction("STOPSIGNAL") == "SIGTERM"
    user = _instruction("USER")
    assert user not in ("root", "0"), user
    assert "/healthz" in _instruction("HEALTHCHECK")
    assert _instruction("FROM").endswith("-slim")


@pytest.mark.slow
@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("unshare") or not shutil.which("tini"),
                    reason="needs root, unshare(1) and tini (apt-get install tini)")
def test_entrypoint_as_pid_1_drains_on_sigterm_and_passes_its_healthcheck(dsn, tmp_path):
    """tini is PID 1, SIGTERM to it drains the supervisor: the running job finishes and
    the namespace exits 0. While it runs, the image's HEALTHCHECK command succeeds."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = enqueue("e2e_sleep", {"seconds": 1.5}, conn=conn)
    log_path = tmp_path / "runs.jsonl"
    port = _free_port()
    argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
            *_local(_exec_form("ENTRYPOINT")), "--app", "e2e_handlers", "-n", "1",
            "--grace", "20", "--metrics-port", str(port)]
    env = dict(os.environ, SUPERVISOR_DSN=dsn, E2E_LOG=str(log_path), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(ROOT)]))
    proc = subprocess.Popen(argv, env=env, cwd=str(TESTS_DIR), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        def init() -> int | None:
            path = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
            pids = path.read_text().split() if path.exists() else []
            return int(pids[0]) if pids else None

        pid1 = wait_until(init, timeout=10, what="the namespace's PID 1")
        status = Path(f"/proc/{pid1}/status").read_text()
        assert re.search(r"^NSpid:.*\s1$", status, flags=re.MULTILINE), status
        # Forked by unshare, it is "unshare" until it has exec'd tini.
        wait_until(lambda: Path(f"/proc/{pid1}/comm").read_text().strip() == "tini",
                   timeout=10, what="PID 1 to be tini")
        wait_until(lambda: any(r["event"] == "start" for r in read_log(log_path)),
                   timeout=30, what="the job to start")

        command = json.loads(_instruction("HEALTHCHECK").split(" CMD ", 1)[1])
        check = [arg.replace("9100", str(port)) for arg in command]
        assert check[0] == "python"
        health = subprocess.run([sys.executable, *check[1:]], capture_output=True, timeout=10)
        assert health.returncode == 0, health.stderr

        os.kill(pid1, getattr(signal, _instruction("STOPSIGNAL")))
        _out, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "SIGTERM: draining" in err, err
    assert [r["event"] for r in read_log(log_path)] == ["start", "end"]
    with psycopg.connect(dsn) as conn:
        state = conn.execute("SELECT state FROM supervisor.jobs WHERE id = %s", (job_id,))
        assert state.fetchone() == ("completed",)
