"""Issue 31: the way from ``exec`` of ``supervisor run`` to its first job imports what
the first claim needs and nothing else. Checked in a real ``supervisor run --burst``
(no config file, no schedules, no metrics port, no tracing): neither the parent (its
modules at exit, a superset of those on the start path) nor a child (what the parent had
imported when it forked) has loaded any of the modules below. Not a timing test: each
of these was on the start path before, and together they were a fifth of its CPU."""

from __future__ import annotations

import sys

import orjson
import psycopg
import pytest
from e2e import Supervisor

from shared.enqueue import enqueue

# Metadata lookups (psycopg's version modules, the namesake check, the metrics'
# version), and what only other commands, settings or features need.
NOT_ON_THE_START_PATH = (
    "importlib.metadata", "pkg_resources", "email.message", "zipfile",
    "tomllib", "cronsim", "hashlib",
    "supervisor.schedules.runner", "supervisor.schedules.firing",
    "supervisor.schedules.admin", "supervisor.admin", "supervisor.dashboard",
    "supervisor.cli.status", "supervisor.cli.jobs", "supervisor.cli.queues",
    "supervisor.cli.schedules", "supervisor.cli.batches", "supervisor.cli.demo",
    "supervisor.cli.dashboard", "opentelemetry", "starlette", "uvicorn",
)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_burst_run_imports_nothing_its_first_job_does_not_need(dsn, tmp_path):
    job_id = enqueue("startpath_first", {}, queue="startpath", dsn=dsn)
    parent_file = tmp_path / "parent_modules.txt"
    sup = Supervisor(dsn, "--burst", "-n", "1", app="startpath_handlers",
                     env={"STARTPATH_PARENT": str(parent_file)})
    assert sup.wait(90) == 0, sup.err
    with psycopg.connect(dsn, autocommit=True) as conn:
        (result,) = conn.execute("SELECT result::text FROM supervisor.jobs WHERE id = %s",
                                 (job_id,)).fetchone()
    in_child = set(orjson.loads(result))
    in_parent = set(parent_file.read_text().split())
    assert "psycopg" in in_parent and "workers.child" in in_child  # the lists are real
    assert sorted(m for m in NOT_ON_THE_START_PATH if m in in_parent) == []
    assert sorted(m for m in NOT_ON_THE_START_PATH if m in in_child) == []
    # The collector, off while the start path imports, is back on in the parent.
    assert (tmp_path / "parent_modules.txt.gc").read_text() == "True"


def test_psycopgs_versions_from_their_dist_info_names_are_what_metadata_says():
    from importlib import metadata

    from supervisor.cli.versions import _dist_info_version

    assert _dist_info_version("psycopg", "psycopg-") == metadata.version("psycopg")
    assert _dist_info_version("psycopg_binary", "psycopg_binary-") == \
        metadata.version("psycopg-binary")


def test_a_version_module_that_does_more_is_left_to_read_its_own(tmp_path, monkeypatch):
    from supervisor.cli.versions import known_versions

    package = tmp_path / "fakepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (tmp_path / "fakepkg-1.2.3.dist-info").mkdir()
    (package / "version.py").write_text(
        'from importlib import metadata\ntry:\n    __version__ = metadata.version("fakepkg")\n'
        'except metadata.PackageNotFoundError:\n    __version__ = "0.0.0.0"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fakepkg.version", raising=False)
    assert known_versions((("fakepkg", "fakepkg-"),)) == ["fakepkg.version"]
    assert sys.modules["fakepkg.version"].__version__ == "1.2.3"
    monkeypatch.delitem(sys.modules, "fakepkg.version")
    (package / "version.py").write_text(
        (package / "version.py").read_text() + "BUILD = metadata.version('other')\n")
    assert known_versions((("fakepkg", "fakepkg-"),)) == []
