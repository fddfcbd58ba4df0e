"""Processes that live as long as the child (issue 45), through real ``supervisor run``
processes: a ``ProcessPoolExecutor`` and a helper started in ``on_child_start`` serve
every job of their child, loky's workers are reused from job to job, what a job starts
outside a scope is still killed at its end, and what the child keeps dies with it
(killed, recycled, drained)."""

from __future__ import annotations

import importlib.util
import os
import signal

import pytest
from e2e import Supervisor, job_row, run_burst, wait_until

from shared.enqueue import enqueue
from workers import lokypool, nativethreads

pytestmark = [pytest.mark.timeout(600)]

APP = "scope_handlers"
needs_joblib = pytest.mark.skipif(importlib.util.find_spec("joblib") is None,
                                  reason="joblib is not installed (the test extra has it)")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: it only waits for its parent)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def wait_gone(pids: list[int], what: str, timeout: float = 15.0) -> None:
    wait_until(lambda: not [pid for pid in pids if alive(pid)], timeout=timeout,
               what=f"{what} ({[pid for pid in pids if alive(pid)]} still alive)")


def completed(dsn: str, job_id: int, timeout: float = 120.0) -> dict:
    """The job's result once it completed (failing fast if it ended otherwise)."""
    def done() -> dict | None:
        row = job_row(dsn, job_id)
        assert row["state"] not in ("discarded", "retryable", "cancelled"), row["errors"]
        return row if row["state"] == "completed" else None
    row = wait_until(done, timeout=timeout, what=f"job {job_id} to complete")
    assert isinstance(row, dict)
    return row["result"]


def kept_pids(result: dict) -> list[int]:
    return [*result["pool"], result["helper"]]


@pytest.mark.slow
def test_a_pool_from_on_child_start_serves_fifty_jobs_in_a_row(dsn):
    ids = [enqueue("sc_pool", dsn=dsn) for _ in range(50)]
    run_burst(dsn, "-n", "2", "--poll-interval", "0.1", app=APP, timeout=300)
    rows = [job_row(dsn, job_id) for job_id in ids]
    assert [(row["id"], row["errors"]) for row in rows if row["state"] != "completed"] == []
    by_child: dict[int, list[dict]] = {}
    for row in rows:
        assert not row["errors"] and row["attempt"] == 1
        by_child.setdefault(row["result"]["child"], []).append(row["result"])
    for child, results in by_child.items():
        # One pool per child, never respawned: the same two workers, the same helper.
        assert {tuple(r["pool"]) for r in results} == {tuple(results[0]["pool"])}, child
        assert len(results[0]["pool"]) == 2
        assert all(r["helper_alive"] for r in results)
        assert {r["helper"] for r in results} == {results[0]["helper"]}
    # The burst is over: every child exited, and what it kept went with it.
    wait_gone([pid for results in by_child.values() for pid in kept_pids(results[0])],
              "the kept processes after the children exited")


@pytest.mark.slow
def test_what_a_job_leaves_outside_a_scope_is_killed_and_the_pool_stays(dsn):
    first = enqueue("sc_pool", dsn=dsn)
    leave = enqueue("sc_leave", dsn=dsn)
    sup = Supervisor(dsn, "-n", "1", "--poll-interval", "0.1", app=APP)
    try:
        before = completed(dsn, first)
        left = completed(dsn, leave)
        # The job's answer leaves the child after its leftovers are reaped.
        assert [pid for pid in left["left"] if alive(pid)] == []
        check = completed(dsn, enqueue("sc_check", {"pids": left["left"]}, dsn=dsn))
        assert check["alive"] == []
        after = completed(dsn, enqueue("sc_pool", dsn=dsn))
        assert before["child"] == left["child"] == after["child"]
        assert before["pool"] == left["pool"] == after["pool"]
        assert after["helper_alive"] and after["helper"] == before["helper"]
    finally:
        sup.stop()


@pytest.mark.slow
def test_a_scope_opened_in_a_job_keeps_its_process_for_later_jobs(dsn):
    scoped = enqueue("sc_scope_in_job", dsn=dsn)
    sup = Supervisor(dsn, "-n", "1", "--poll-interval", "0.1", app=APP)
    try:
        helper = completed(dsn, scoped)["scoped"]
        later = completed(dsn, enqueue("sc_pool", dsn=dsn))
        assert later["scoped"] == [helper]
        assert all(alive(pid) for pid in [helper, *kept_pids(later)])
        sup.signal(signal.SIGTERM)
        assert sup.wait(60) == 0, sup.err
        wait_gone([helper, *kept_pids(later)], "the kept processes after the drain")
    finally:
        sup.stop()


@pytest.mark.slow
def test_kept_processes_die_when_their_child_is_killed(dsn):
    sup = Supervisor(dsn, "-n", "1", "--poll-interval", "0.1", app=APP)
    try:
        first = completed(dsn, enqueue("sc_pool", dsn=dsn))
        assert all(alive(pid) for pid in kept_pids(first))
        os.kill(first["child"], signal.SIGKILL)
        wait_gone([first["child"], *kept_pids(first)], "the killed child's kept processes")
        # Its replacement starts a pool of its own and serves jobs with it.
        second = completed(dsn, enqueue("sc_pool", dsn=dsn))
        assert second["child"] != first["child"]
        assert set(second["pool"]).isdisjoint(first["pool"])
    finally:
        sup.stop()


@pytest.mark.slow
def test_a_kept_process_in_its_own_session_dies_when_the_parent_kills_the_child(dsn, tmp_path):
    pidfile = tmp_path / "helper.pid"
    hung = enqueue("sc_scope_then_hang", {"pidfile": str(pidfile)}, timeout=3,
                   max_attempts=1, dsn=dsn)
    run_burst(dsn, "-n", "1", "--poll-interval", "0.1", app=APP, timeout=120)
    row = job_row(dsn, hung)
    assert row["state"] == "discarded" and row["errors"][-1]["kind"] == "timeout", row
    # Out of the child's process group: the parent SIGKILLed it by pid before the group.
    wait_gone([int(pidfile.read_text())], "the kept helper in its own session")


@pytest.mark.slow
def test_kept_processes_die_when_their_child_recycles_and_when_the_supervisor_drains(dsn):
    sup = Supervisor(dsn, "-n", "1", "--poll-interval", "0.1", "--max-jobs-per-child", "2",
                     app=APP)
    try:
        results = [completed(dsn, enqueue("sc_pool", dsn=dsn)) for _ in range(6)]
        children = list(dict.fromkeys(r["child"] for r in results))
        assert len(children) >= 2, children  # it recycled
        for old in children[:-1]:
            kept = kept_pids(next(r for r in results if r["child"] == old))
            wait_gone([old, *kept], f"recycled child {old}'s kept processes")
        last = next(r for r in results if r["child"] == children[-1])
        sup.signal(signal.SIGTERM)
        assert sup.wait(60) == 0, sup.err
        wait_gone([children[-1], *kept_pids(last)], "the kept processes after the drain")
    finally:
        sup.stop()


@pytest.mark.slow
@needs_joblib
def test_loky_workers_from_joblib_config_are_reused_across_jobs(dsn):
    # Two CPUs each, on two children: the job takes both children's share, in one of
    # them, with two loky workers.
    ids = [enqueue("sc_joblib", cpus=2, dsn=dsn) for _ in range(8)]
    run_burst(dsn, "-n", "2", "--poll-interval", "0.1", app=APP, timeout=240)
    rows = [job_row(dsn, job_id) for job_id in ids]
    assert [row["errors"] for row in rows if row["state"] != "completed"] == []
    by_child: dict[int, list[dict]] = {}
    for row in rows:
        by_child.setdefault(row["result"]["child"], []).append(row["result"])
    workers: list[int] = []
    for child, results in by_child.items():
        first = set(results[0]["workers"])
        assert len(first) == 2 and child not in first  # loky's, sized from cpus=2
        assert all(set(r["workers"]) == first for r in results), results
        assert all(set(r["ran_on"]) <= first for r in results), results
        workers += first
        seconds = [round(r["seconds"], 4) for r in results]
        print(f"child {child}: joblib Parallel call per job, s (first is cold): {seconds}")
    # loky did not see its workers die: nothing in any job's captured output.
    assert [row["output"] for row in rows if row["output"]] == []
    wait_gone(workers, "loky's workers after the children exited")


def test_a_jobs_pool_size_follows_its_cpus_and_the_childs_share(monkeypatch):
    monkeypatch.setattr(nativethreads, "_child", 2)
    monkeypatch.setattr(nativethreads, "_current", 8)  # a cpus=4 job
    assert lokypool.job_pool_size() == lokypool.PoolSize(workers=4, threads_per_worker=2)
    monkeypatch.setattr(nativethreads, "_current", 2)  # a job that reserved nothing
    assert lokypool.job_pool_size() == lokypool.PoolSize(workers=1, threads_per_worker=2)
    monkeypatch.setattr(nativethreads, "_child", None)  # native_threads = "off"
    assert lokypool.job_pool_size() == lokypool.PoolSize(workers=1, threads_per_worker=None)
