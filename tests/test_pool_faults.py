"""The pool's guards with real processes: a memory cap that holds while a job runs,
processes a handler starts that die with its job or with the supervisor, children
killed from outside while booting, and a parent frozen for longer than the heartbeat
timeout. Tests wait for outcomes with deadlines, never for a fixed time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import podfaults_handlers  # noqa: F401  (handlers are imported before forking)
import pytest
from pool_driver import Driver, drivers_made, gone, wait_gone

from supervisor.pool import JobDone, JobFailed

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]  # processes or waits: CI lane
_make_driver = pytest.fixture(name="make_driver")(drivers_made)

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def pidfile_pid(path: Path, timeout: float = 10.0) -> int:
    end = time.monotonic() + timeout
    while True:
        try:
            text = path.read_text().strip()
            if text:
                return int(text)
        except FileNotFoundError:
            pass
        assert time.monotonic() < end, f"{path} never written"
        time.sleep(0.01)


# -- memory ----------------------------------------------------------------------------

def test_a_job_growing_past_the_cap_is_killed_as_memory(make_driver, tmp_path):
    d = make_driver(max_memory_per_child=300 * MIB, memory_sample=0.05,
                    heartbeat_timeout=10.0)
    report = tmp_path / "got"
    out = d.run("pf_grow", orjson.dumps({"step_mb": 8, "max_mb": 1200,
                                         "report": str(report)}).decode())
    assert isinstance(out, JobFailed), out
    assert (out.kind, out.terminal) == ("memory", False)
    assert "passed the 300 MiB max_memory_per_child" in out.message
    # The cap held: it was stopped on its way, nowhere near the 1200 MB it wanted.
    assert int(report.read_text()) < 800
    assert isinstance(d.run("pf_pid"), JobDone)  # and the pool carries on


def test_a_job_that_freed_its_memory_still_gets_its_child_recycled(make_driver):
    # No sample lands during the spike (one every 30 s): only the peak can tell.
    d = make_driver(max_memory_per_child=300 * MIB, memory_sample=30.0,
                    heartbeat_timeout=10.0)
    out = d.run("pf_spike", '{"megabytes": 500}')
    assert isinstance(out, JobDone), out
    spiker = int(out.result_json)
    assert int(d.run("pf_pid").result_json) != spiker
    wait_gone([spiker])


# -- processes a handler starts ------------------------------------------------------

@pytest.mark.parametrize("setsid", [False, True], ids=["in-group", "setsid"])
@pytest.mark.parametrize("fail", [False, True], ids=["done", "failed"])
def test_a_process_left_by_a_handler_dies_with_its_job(make_driver, tmp_path, setsid,
                                                      fail):
    d = make_driver()
    pidfile = tmp_path / "left.pid"
    args = {"pidfile": str(pidfile), "setsid": setsid, "fail": fail}
    out = d.run("pf_leave", orjson.dumps(args).decode())
    assert isinstance(out, JobFailed if fail else JobDone), out
    wait_gone([pidfile_pid(pidfile)], timeout=2.0)
    assert isinstance(d.run("pf_pid"), JobDone)  # the child itself lives on


def test_a_daemonized_grandchild_dies_with_its_job(make_driver, tmp_path):
    d = make_driver()
    pidfile = tmp_path / "daemon.pid"
    out = d.run("pf_orphan", orjson.dumps({"pidfile": str(pidfile)}).decode())
    assert isinstance(out, JobDone), out
    wait_gone([pidfile_pid(pidfile)], timeout=2.0)


def test_a_setsid_process_dies_when_its_job_times_out(make_driver, tmp_path):
    d = make_driver(kill_grace=1.0)
    pidfile = tmp_path / "left.pid"
    args = {"pidfile": str(pidfile), "setsid": True, "seconds": 30}
    out = d.run("pf_leave", orjson.dumps(args).decode(), timeout=0.5)
    assert out.kind == "timeout"
    wait_gone([pidfile_pid(pidfile)], timeout=2.0)


PARENT_SCRIPT = textwrap.dedent("""
    import sys
    import podfaults_handlers
    from pool_driver import Driver
    d = Driver(size=2, heartbeat_timeout={hb})
    d.start()
    jobs = [d.job(kind, args) for kind, args in {jobs!r}]
    for j in jobs:
        assert d.pool.dispatch(j)
    print(" ".join(str(c.pid) for c in d.pool._children.values()), flush=True)
    d.until(lambda: all(d.finished(j.id) for j in jobs), timeout=60)
    for j in jobs:
        o = d.finished(j.id)
        print(type(o).__name__, getattr(o, "kind", ""), flush=True)
    d.close()
""")


def parent_process(jobs: list[tuple[str, str]], heartbeat_timeout: float = 1.0):
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    script = PARENT_SCRIPT.format(jobs=jobs, hb=heartbeat_timeout)
    return subprocess.Popen([sys.executable, "-c", script], env=env,
                            stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("setsid", [False, True], ids=["in-group", "setsid"])
def test_a_sigkilled_supervisor_takes_its_handlers_processes_along(tmp_path, setsid):
    pidfiles = [tmp_path / "a.pid", tmp_path / "b.pid"]
    jobs = [("pf_leave", orjson.dumps({"pidfile": str(p), "setsid": setsid,
                                       "seconds": 60}).decode()) for p in pidfiles]
    parent = parent_process(jobs)
    try:
        children = [int(p) for p in parent.stdout.readline().split()]
        left = [pidfile_pid(p) for p in pidfiles]
        assert not any(gone(pid) for pid in children + left)
        parent.kill()
        parent.wait()
        wait_gone(children + left, timeout=2.0)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


# -- boot deaths and a parent that sleeps --------------------------------------------

@pytest.mark.slow
def test_children_killed_while_booting_are_respawned_never_halted():
    d = Driver(size=1, crash_loop_limit=3, child_imports=("podfaults_slowboot",))
    d.pool.start()
    try:
        for n in range(1, 6):  # more than the crash-loop limit
            d.until(lambda n=n: len(d.events("spawned")) >= n)
            pid = d.events("spawned")[-1].pid
            os.kill(pid, signal.SIGKILL)
            d.until(lambda n=n: len(d.events("boot_failed")) >= n)
        d.until(lambda: d.pool.idle_count() == 1)  # raises PoolHalted if it halted
        assert d.pool.halted is None
        assert isinstance(d.run("pf_pid"), JobDone)
    finally:
        d.close()


@pytest.mark.slow
def test_a_frozen_supervisor_does_not_blame_its_children_as_hung():
    jobs = [("pf_sleep", '{"seconds": 4}')] * 2
    parent = parent_process(jobs, heartbeat_timeout=1.0)
    try:
        children = [int(p) for p in parent.stdout.readline().split()]
        # A frozen process tree (a VM pause): children first, so no beat is in flight.
        for pid in children:
            os.kill(pid, signal.SIGSTOP)
        os.kill(parent.pid, signal.SIGSTOP)
        time.sleep(2.5)  # the fault itself: frozen for longer than the heartbeat timeout
        os.kill(parent.pid, signal.SIGCONT)  # the parent wakes first: the worst case
        for pid in children:
            os.kill(pid, signal.SIGCONT)
        out, _ = parent.communicate(timeout=30)
        assert out.split("\n")[:2] == ["JobDone ", "JobDone "], out
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
