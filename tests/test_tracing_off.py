"""Without the otel extra (or without using it) nothing changes and nothing is
imported: every producer API and a whole supervisor run (parent and child) leave
``opentelemetry`` out of ``sys.modules``, and ``--otel`` without the package is a
one-line error. Each case runs in a fresh interpreter (tests/tracing_probe.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest
from e2e import ROOT, TESTS_DIR, state_counts

pytestmark = pytest.mark.timeout(120)


def probe(dsn: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SUPERVISOR_DSN=dsn,
               PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(ROOT)]))
    return subprocess.run([sys.executable, str(TESTS_DIR / "tracing_probe.py"), *args],
                          env=env, capture_output=True, text=True, timeout=90,
                          cwd=str(TESTS_DIR))


@pytest.mark.parametrize("mode", [[], ["--block"]], ids=["installed-unused", "not-installed"])
def test_no_opentelemetry_module_is_imported_by_producers_parent_or_child(dsn, conn, mode):
    done = probe(dsn, *mode)
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] == 0, done.stderr
    assert report["after_enqueue"] == []
    assert report["after_run"] == []
    assert state_counts(dsn) == {"completed": len(report["ids"]) + 1}  # + the callback
    rows = conn.execute("SELECT result, trace_context FROM supervisor.jobs").fetchall()
    assert {orjson.dumps(result) for result, _ in rows} == {b"[]"}  # in every child
    assert {trace for _, trace in rows} == {None}


def test_otel_on_without_the_package_is_a_one_line_error(dsn):
    done = probe(dsn, "--block", "--otel")
    report = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == ["supervisor: error: otel is on but OpenTelemetry is not installed: "
                     "pip install 'pg-supervisor[otel]'"], done.stderr
    assert set(state_counts(dsn)) == {"available", "scheduled"}  # nothing ran
