"""The CPUs a supervisor may use come from the container, not the host (issue 26): the
cgroup's quota (v2 ``cpu.max``, v1 CFS) and the affinity mask, the least of them, set
``-n``'s default; the start-up line says which. The cgroup root is a fake directory
here (``SUPERVISOR_CGROUP_ROOT``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from e2e import ROOT, TESTS_DIR, read_log

from shared.cpus import CGROUP_ROOT_ENV, available_cpus, cgroup_quota
from shared.enqueue import enqueue_many


def fake_v2(tmp_path, text: str):
    (tmp_path / "cpu.max").write_text(text)
    return str(tmp_path)


def test_v2_cpu_max_rounds_up_to_whole_cpus(tmp_path):
    assert cgroup_quota(fake_v2(tmp_path, "150000 100000\n")).count == 2
    assert cgroup_quota(str(tmp_path)).source == "cgroup cpu.max 150000 100000"


def test_v2_without_a_quota_is_no_limit(tmp_path):
    assert cgroup_quota(fake_v2(tmp_path, "max 100000\n")) is None


def test_v1_cfs_quota(tmp_path):
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text("50000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_quota(str(tmp_path)).count == 1
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_quota(str(tmp_path)) is None


def test_unreadable_or_garbled_files_are_no_limit(tmp_path):
    assert cgroup_quota(str(tmp_path / "missing")) is None
    assert cgroup_quota(fake_v2(tmp_path, "lots\n")) is None


def test_the_least_of_cgroup_affinity_and_host_wins(tmp_path):
    found = available_cpus(fake_v2(tmp_path, "100000 100000"))
    assert found.count == 1 and found.source.startswith("cgroup cpu.max")
    unlimited = available_cpus(str(tmp_path / "none"))
    assert unlimited.count == len(os.sched_getaffinity(0))


def run_burst_without_n(dsn: str, tmp_path, env: dict[str, str], prefix: list[str]):
    """``supervisor run --burst`` with no ``-n`` over 6 no-op jobs; its stderr and the
    pids that ran them."""
    log = tmp_path / "runs.log"
    enqueue_many("e2e_noop", [{"n": i} for i in range(6)], dsn=dsn)
    full_env = {**os.environ, "SUPERVISOR_DSN": dsn, "E2E_LOG": str(log),
                "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), str(ROOT)]), **env}
    done = subprocess.run([*prefix, sys.executable, "-m", "supervisor", "run", "--burst",
                           "--app", "e2e_handlers", "--poll-interval", "0.1"],
                          env=full_env, cwd=str(TESTS_DIR), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr, {r["pid"] for r in read_log(log)}


@pytest.mark.slow
def test_taskset_one_cpu_starts_one_child(dsn, tmp_path):
    err, pids = run_burst_without_n(dsn, tmp_path, {CGROUP_ROOT_ENV: str(tmp_path / "none")},
                                    ["taskset", "-c", "0"])
    assert "starting 1 children (one per CPU: 1 CPU from sched_getaffinity" in err, err
    assert len(pids) == 1


@pytest.mark.slow
def test_a_cgroup_quota_of_one_cpu_starts_one_child(dsn, tmp_path):
    root = tmp_path / "cgroup"
    root.mkdir()
    env = {CGROUP_ROOT_ENV: fake_v2(root, "100000 100000\n")}
    err, pids = run_burst_without_n(dsn, tmp_path, env, [])
    assert ("starting 1 children (one per CPU: 1 CPU from cgroup cpu.max 100000 100000)"
            in err), err
    assert len(pids) == 1
