"""supervisord (the PyPI distribution ``supervisor``) installed into the same environment:
both ship the import package ``supervisor``, pip puts their files in one directory and
the last one installed owns ``__init__.py``. Simulated in a temporary copy of the package
tree with supervisord's files (as its 4.x wheel lays them out) added, run by real
Python processes: ``import supervisor`` and ``supervisor run`` refuse with one line
naming both distributions."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUPERVISORD_INIT = "# this is a package\n"
SUPERVISORD_MODULES = ("supervisord.py", "supervisorctl.py", "options.py", "xmlrpc.py",
                       "process.py", "http.py")


def install_tree(site: Path, *, supervisord: bool, theirs_last: bool,
                 modules: tuple[str, ...] = SUPERVISORD_MODULES) -> None:
    """pg-supervisor's ``supervisor`` package in ``site``, then supervisord's files (its
    ``__init__.py`` only when it was installed last) and its dist-info."""
    shutil.copytree(ROOT / "supervisor", site / "supervisor",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if not supervisord:
        return
    package = site / "supervisor"
    for name in modules:
        (package / name).write_text("# supervisord\n")
    if theirs_last:
        (package / "__init__.py").write_text(SUPERVISORD_INIT)
    info = site / "supervisor-4.3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: supervisor\nVersion: 4.3.0\n")
    (info / "top_level.txt").write_text("supervisor\n")
    record = ["supervisor/__init__.py,,", *(f"supervisor/{m},," for m in modules),
              "supervisor-4.3.0.dist-info/METADATA,,", "supervisor-4.3.0.dist-info/RECORD,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")


def python(site: Path, *args: str) -> subprocess.CompletedProcess:
    # PYTHONPATH comes before the editable install's path entry, as site-packages would.
    env = dict(os.environ, PYTHONPATH=str(site))
    env.pop("SUPERVISOR_DSN", None)
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=60, cwd=site)


def assert_one_line_refusal(result: subprocess.CompletedProcess) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "pg-supervisor and supervisord" in lines[0]
    assert "'supervisor'" in lines[0] and "pip uninstall supervisor" in lines[0]


def test_without_supervisord_the_package_works(tmp_path):
    install_tree(tmp_path, supervisord=False, theirs_last=False)
    result = python(tmp_path, "-c", "import supervisor; print(supervisor.__file__, "
                                    "callable(supervisor.enqueue))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(tmp_path / "supervisor" / "__init__.py"), "True"]


def test_supervisord_installed_after_us_is_refused_by_supervisor_run(tmp_path):
    install_tree(tmp_path, supervisord=True, theirs_last=True)
    # What nothing of ours can intercept: supervisord's __init__.py runs none of our
    # code, so a producer gets the AttributeError the README explains.
    producer = python(tmp_path, "-c", "import supervisor; supervisor.enqueue")
    assert "AttributeError" in producer.stderr
    assert_one_line_refusal(python(tmp_path, "-m", "supervisor", "run", "-n", "1",
                                   "--app", "nothing_needed"))


def test_supervisord_installed_before_us_is_refused_at_import(tmp_path):
    install_tree(tmp_path, supervisord=True, theirs_last=False)
    producer = python(tmp_path, "-c", "import supervisor")
    assert producer.returncode != 0
    last = producer.stderr.strip().splitlines()[-1]
    assert last.startswith("supervisor.namesake.NamesakeInstalled: pg-supervisor and "
                           "supervisord"), producer.stderr
    assert_one_line_refusal(python(tmp_path, "-m", "supervisor", "run", "-n", "1"))
    assert_one_line_refusal(python(tmp_path, "-m", "supervisor", "status"))


@pytest.mark.parametrize("theirs_last", [False, True])
def test_files_claimed_by_the_supervisor_distribution_are_refused_by_run(tmp_path,
                                                                        theirs_last):
    # A supervisord whose modules have other names: importlib.metadata still tells.
    install_tree(tmp_path, supervisord=True, theirs_last=theirs_last,
                 modules=("events.py",))
    assert_one_line_refusal(python(tmp_path, "-m", "supervisor", "run", "-n", "1"))
