"""A job's ``cpu_seconds`` counts the CPU of the child's whole process tree during the job
(issue 47): a helper still running at the job's end, a zombie, a grandchild reaped by
its own parent, an orphan, loky's workers; and nothing twice. The meter on its own with
a process kept across jobs, then real ``supervisor run`` children."""

from __future__ import annotations

import importlib.util
import multiprocessing
import resource

import pytest
from e2e import job_row, run_burst

from shared.enqueue import enqueue
from workers.usage import UsageMeter

pytestmark = [pytest.mark.timeout(240)]

HAS_JOBLIB = importlib.util.find_spec("joblib") is not None


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def _pool_worker(todo, done) -> None:
    """A worker kept across jobs: spins as much CPU as it is told, each time."""
    while True:
        seconds = todo.get()
        start = _cpu()
        while _cpu() - start < seconds:
            pass
        done.put(_cpu() - start)


def test_cpu_a_process_kept_across_jobs_spends_counts_for_the_job_it_spent_it_in():
    ctx = multiprocessing.get_context("fork")
    todo, done = ctx.Queue(), ctx.Queue()
    worker = ctx.Process(target=_pool_worker, args=(todo, done), daemon=True)
    worker.start()
    try:
        meter = UsageMeter(lambda message: None)
        # Work done before the job starts is not the job's.
        todo.put(0.5)
        done.get(timeout=60)
        meter.start()
        todo.put(2.0)
        used = done.get(timeout=120)
        first = meter.stop()
        assert worker.is_alive()
        assert first.cpu_seconds >= 0.9 * used >= 1.8, (first, used)
        assert first.cpu_seconds <= used + 0.3, (first, used)
        # Between jobs it works again; the next job, which hands it nothing, is clean.
        todo.put(0.5)
        done.get(timeout=60)
        meter.start()
        second = meter.stop()
        assert second.cpu_seconds < 0.1, second
    finally:
        worker.kill()
        worker.join()


def test_a_process_that_exits_mid_job_and_is_reaped_is_counted_once():
    ctx = multiprocessing.get_context("fork")
    meter = UsageMeter(lambda message: None)
    todo, done = ctx.Queue(), ctx.Queue()
    todo.put(1.0)
    meter.start()
    worker = ctx.Process(target=_pool_worker, args=(todo, done), daemon=True)
    worker.start()
    used = done.get(timeout=120)
    worker.kill()
    worker.join()  # reaped: its CPU moves to this process's children's rusage
    usage = meter.stop()
    assert 0.9 * used <= usage.cpu_seconds <= used + 0.3, (usage, used)


def burst(dsn: str) -> None:
    run_burst(dsn, "-n", "1", "--poll-interval", "0.1", app="cost_handlers", timeout=200)


@pytest.mark.slow
def test_helpers_that_outlive_the_job_zombies_and_grandchildren_count_once(dsn):
    left = enqueue("cost_helper_left", {"seconds": 2.0}, dsn=dsn)
    after_left = enqueue("cost_quiet", {}, dsn=dsn)
    zombie = enqueue("cost_zombie", {"seconds": 1.0}, dsn=dsn)
    grandchild = enqueue("cost_grandchild", {"seconds": 0.5}, dsn=dsn)
    pool = enqueue("cost_mp_pool", {"tasks": 8, "seconds": 0.25}, dsn=dsn)
    sleepers = enqueue("cost_many_sleepers", {"count": 200}, dsn=dsn)
    after = enqueue("cost_quiet", {}, dsn=dsn)
    burst(dsn)
    for job_id in (left, zombie, grandchild, pool):
        row = job_row(dsn, job_id)
        assert row["state"] == "completed", (row["errors"], row["usage"])
        used = row["result"]["helper_cpu"]
        cpu = row["usage"]["cpu_seconds"]
        # At least what the helpers measured themselves; not twice it.
        assert 0.9 * used <= cpu <= used + 0.5, (row["kind"], cpu, used)
    assert job_row(dsn, left)["usage"]["cpu_seconds"] >= 1.8
    # 200 idle processes left behind: forking them is the job's only CPU, and the next
    # job (cost_quiet, after) pays nothing for them.
    row = job_row(dsn, sleepers)
    assert row["state"] == "completed", row["errors"]
    assert row["usage"]["cpu_seconds"] < 5.0, row["usage"]
    for job_id in (after_left, after):
        assert job_row(dsn, job_id)["usage"]["cpu_seconds"] < 0.1


@pytest.mark.slow
@pytest.mark.skipif(not HAS_JOBLIB, reason="joblib is not installed (the test extra has it)")
def test_a_joblib_job_counts_its_loky_workers_cpu(dsn):
    first = enqueue("cost_joblib", {"tasks": 4, "seconds": 0.5}, dsn=dsn)
    second = enqueue("cost_joblib", {"tasks": 4, "seconds": 0.5}, dsn=dsn)
    burst(dsn)
    for job_id in (first, second):
        row = job_row(dsn, job_id)
        assert row["state"] == "completed", (row["errors"], row["usage"])
        used = row["result"]["helper_cpu"]
        assert used >= 1.8
        cpu = row["usage"]["cpu_seconds"]
        # The workers' own CPU, plus starting them (a Python each, loky's tracker).
        assert 0.9 * used <= cpu <= used + 3.0, (cpu, used)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_JOBLIB, reason="joblib is not installed (the test extra has it)")
def test_back_to_back_joblib_jobs_in_one_child_each_get_a_fresh_executor_quietly(dsn):
    """A handler calling plain ``Parallel`` (no ``joblib_config``) in job after job: the
    runtime shuts the last job's loky executor down before reaping, so no job reuses
    one whose workers were killed (it failed, or hung on a dead worker's queue lock)
    and loky's tracker, kept, prints nothing."""
    ids = [enqueue("cost_joblib", {"tasks": 4, "seconds": 0.1}, dsn=dsn) for _ in range(6)]
    sup = run_burst(dsn, "-n", "1", "--poll-interval", "0.1", app="cost_handlers",
                    timeout=200)
    pids = set()
    for job_id in ids:
        row = job_row(dsn, job_id)
        assert row["state"] == "completed", row["errors"]
        pids.add(row["result"]["pid"])
    assert len(pids) == 1, pids  # one child ran them all
    assert "Traceback" not in sup.err, sup.err
    assert "died unexpectedly" not in sup.err, sup.err
