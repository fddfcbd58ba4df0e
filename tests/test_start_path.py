"""Issue 31: the way from ``exec`` of ``supervisor run`` to its first job imports what
the first claim needs and nothing else. Checked in a real ``supervisor run --burst``
(no config file, no schedules, no metrics port, no tracing): neither the parent (its
modules at exit, a superset of those on the start path) nor a child (what the parent had
imported when it forked) has loaded any of the modules below. Not a timing test: each
of these was on the start path before, and together they were a fifth of its CPU."""

from __future__ import annotations

import orjson
import psycopg
import pytest
from e2e import Supervisor

from shared.enqueue import enqueue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

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
