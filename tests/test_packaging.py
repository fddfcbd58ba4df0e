"""The package as pip builds it: a wheel of this checkout holds the three import packages
with their data (every migration, the dashboard's templates and static files) and
nothing else of the checkout (tests, scripts, docs), so a user's install has what
``supervisor migrate`` and ``supervisor dashboard`` read. Built for real with pip,
without build isolation (the venv's setuptools; no download), from a copy of what the
build reads: a build in the checkout itself would reuse its ``build/`` directory, whose
files from an earlier build could hide one that a changed configuration drops."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> set[str]:
    source = tmp_path_factory.mktemp("source")
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("supervisor", "workers", "shared"):
        shutil.copytree(ROOT / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--quiet", "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = out.glob("pg_supervisor-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_the_wheel_holds_the_three_packages_and_nothing_else_of_the_checkout(wheel_names):
    tops = {name.split("/")[0] for name in wheel_names}
    infos = {top for top in tops if top.endswith(".dist-info")}
    assert tops - infos == {"supervisor", "workers", "shared"}
    for package in ("supervisor", "workers", "shared"):
        modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / package).rglob("*.py")
                   if "__pycache__" not in p.parts}
        assert modules <= wheel_names, sorted(modules - wheel_names)[:5]


def test_the_wheel_carries_every_migration_and_the_dashboards_files(wheel_names):
    schema = sorted(p.name for p in (ROOT / "shared" / "schema").glob("*.sql"))
    # the baseline (0001-0029 folded) and the upgrade of a database at 0029 into it
    assert {"0030_baseline.sql", "upgrade_from_0029.sql"} <= set(schema), schema
    data = [*(ROOT / "shared" / "schema").glob("*.sql"),
            *(ROOT / "supervisor" / "dashboard" / "templates").glob("*.html"),
            *(ROOT / "supervisor" / "dashboard" / "static").iterdir()]
    assert len(data) - len(schema) > 15
    missing = [p.relative_to(ROOT).as_posix() for p in data
               if p.relative_to(ROOT).as_posix() not in wheel_names]
    assert not missing, missing
