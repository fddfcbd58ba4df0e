"""The pool with real forked children: every way a child can end, and what is left
behind. The pool is driven by a small selectors loop, like the parent's, and tests wait
for outcomes, never for a fixed time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import orjson
import pool_handlers  # noqa: F401  (handlers are imported before forking, as --app does)
import pytest
from pool_driver import Driver, cmdline, drivers_made, gone, wait_gone

from supervisor.engine.policy import resolve_timeout
from supervisor.pool import (
    JobDone,
    JobFailed,
    JobProgress,
    JobStarted,
    PoolHalted,
)

pytestmark = pytest.mark.timeout(30)
_make_driver = pytest.fixture(name="make_driver")(drivers_made)

ROOT = Path(__file__).resolve().parent.parent


def test_handler_returns_done_with_result(make_driver):
    d = make_driver()
    out = d.run("pool_echo", '{"value": {"a": [1, 2, 3]}}')
    assert isinstance(out, JobDone) and out.result_json == '{"a":[1,2,3]}'


def test_handler_raises_full_traceback_reaches_parent(make_driver):
    d = make_driver()
    out = d.run("pool_raise", '{"message": "no such image"}')
    assert isinstance(out, JobFailed) and out.kind == "error" and not out.terminal
    assert out.message == "ValueError: no such image"
    assert "Traceback (most recent call last)" in out.traceback
    assert "in inner" in out.traceback and "raise ValueError(message)" in out.traceback


def test_discard_is_terminal_and_retry_carries_its_delay(make_driver):
    d = make_driver()
    discard = d.run("pool_discard")
    assert (discard.kind, discard.terminal, discard.message) == ("discard", True,
                                                                 "not worth it")
    retry = d.run("pool_retry", '{"delay": 7.5}')
    assert (retry.kind, retry.terminal, retry.retry_delay) == ("retry", False, 7.5)


def test_segfault_is_crashed_and_the_child_is_replaced(make_driver):
    d = make_driver()
    first = d.run("pool_pid").result_json
    out = d.run("pool_segv")
    assert out.kind == "crashed" and "SIGSEGV" in out.message
    second = d.run("pool_pid").result_json
    assert first != second


def test_os_exit_is_crashed_with_the_code(make_driver):
    d = make_driver()
    out = d.run("pool_exit", '{"code": 3}')
    assert out.kind == "crashed" and "exited with code 3" in out.message
    assert isinstance(d.run("pool_noop"), JobDone)


def test_sleep_past_timeout_is_killed_within_timeout_plus_grace(make_driver):
    d = make_driver(kill_grace=1.0)
    out = d.run("pool_sleep", '{"seconds": 30}', timeout=0.5)
    assert out.kind == "timeout" and out.message == "ran past its 0.5 s timeout"
    assert out.duration < 0.5 + 1.0 + 1.0  # the margin is the test loop's, not the pool's
    assert isinstance(d.run("pool_noop"), JobDone)


def test_handler_timeout_from_the_job_decorator(make_driver):
    d = make_driver()
    probe = d.job("pool_sleep_with_timeout")
    out = d.run("pool_sleep_with_timeout", '{"seconds": 30}', timeout=resolve_timeout(probe, 9))
    assert out.kind == "timeout" and "0.3 s" in out.message


def test_native_code_holding_the_gil_while_burning_cpu_is_busy_not_hung(make_driver):
    # The regex holds the GIL for about 2 s, the heartbeat timeout is 0.5 s: its
    # heartbeat thread starves, but its CPU time moves, so it is left to finish.
    d = make_driver(heartbeat_timeout=0.5)
    out = d.run("pool_regex_busy", '{"seconds": 2.0}')
    assert isinstance(out, JobDone), out
    assert len(d.events("native")) == 1
    assert not d.events("killed")


def _killed_within(d: Driver, job, stop_pid: int | None = None):
    """Dispatch ``job``; the seconds from its START (or, with ``stop_pid``, from the
    SIGSTOP sent to that pid once the job started) until the child was killed, and
    the job's failure."""
    assert d.pool.dispatch(job)
    d.until(lambda: any(isinstance(o, JobStarted) and o.job.id == job.id
                        for o in d.outcomes))
    if stop_pid is not None:
        os.kill(stop_pid, signal.SIGSTOP)
    t0 = time.monotonic()
    d.until(lambda: d.events("killed"))
    waited = time.monotonic() - t0
    d.until(lambda: d.finished(job.id) is not None)
    return waited, d.finished(job.id)


def test_native_call_holding_the_gil_without_cpu_is_hung_in_time(make_driver):
    # libc sleep through PyDLL keeps the GIL and uses no CPU: no beat, no CPU time.
    d = make_driver(heartbeat_timeout=1.0)
    waited, out = _killed_within(d, d.job("pool_gil_sleep"))
    assert out.kind == "hung" and out.message == "no heartbeat and no CPU time for 1.0 s"
    assert waited <= 1.0 + 1.0, waited  # heartbeat_timeout + 1 s (a generous bound)
    assert isinstance(d.run("pool_noop"), JobDone)


def test_child_sigstopped_mid_job_is_hung_in_time(make_driver):
    d = make_driver(heartbeat_timeout=1.0)
    pid = d.events("spawned")[-1].pid
    waited, out = _killed_within(d, d.job("pool_sleep", '{"seconds": 30}'), stop_pid=pid)
    assert out.kind == "hung"
    assert out.message == "stopped (state T), no heartbeat for 1.0 s"
    assert waited <= 1.0 + 1.0, waited
    assert isinstance(d.run("pool_noop"), JobDone)


def test_a_kinds_heartbeat_timeout_overrides_the_pools(make_driver):
    d = make_driver(heartbeat_timeout=30.0)
    waited, out = _killed_within(d, d.job("pool_short_beat"))
    assert out.kind == "hung" and out.message == "no heartbeat and no CPU time for 0.5 s"
    assert waited <= 0.5 + 1.0, waited


def test_sigstopped_child_is_caught_by_the_heartbeat_deadline(make_driver):
    d = make_driver(heartbeat_timeout=0.5)
    out = d.run("pool_stop_self")
    assert out.kind == "hung"
    assert isinstance(d.run("pool_noop"), JobDone)


def test_timeout_kills_the_whole_group_with_grandchildren(make_driver, tmp_path):
    d = make_driver()
    pidfile = tmp_path / "grandchild.pid"
    out = d.run("pool_grandchild", f'{{"pidfile": "{pidfile}", "seconds": 60}}',
                timeout=0.5)
    assert out.kind == "timeout"
    wait_gone([int(pidfile.read_text())])


def test_child_over_memory_limit_after_its_job_is_recycled(make_driver):
    # It keeps 300 MB after returning; no sample while it runs (one every 30 s), so the
    # child's own check between jobs (or the peak) recycles it.
    d = make_driver(max_memory_per_child=200 << 20, heartbeat_timeout=10.0,
                    memory_sample=30.0)
    out = d.run("pool_hoard", '{"megabytes": 300}')
    assert isinstance(out, JobDone), out
    d.until(lambda: d.events("recycled"))
    hoarder = int(out.result_json.split(":")[1].rstrip("}"))
    assert d.events("recycled")[0].pid == hoarder
    assert not [o for o in d.outcomes if isinstance(o, JobFailed)]
    assert d.run("pool_pid").result_json != str(hoarder)


def test_unserializable_and_oversized_results_fail_and_the_child_survives(make_driver):
    d = make_driver(max_result_bytes=1000)
    pid = d.run("pool_pid").result_json
    out = d.run("pool_unserializable")
    assert out.kind == "result" and "not JSON-serializable" in out.message
    assert d.run("pool_pid").result_json == pid
    out = d.run("pool_big_result", '{"size": 5000}')
    assert out.kind == "result" and "over the 1000-byte limit" in out.message
    assert d.run("pool_pid").result_json == pid


def test_binding_error_and_unknown_kind_are_terminal(make_driver):
    d = make_driver()
    out = d.run("pool_echo", '{"value": 1, "nope": 1}')
    assert out.kind == "binding" and out.terminal and "nope" in out.message
    out = d.run("pool_echo", "[1, 2]")
    assert out.kind == "binding" and out.terminal
    out = d.run("pool_no_such_kind")
    assert out.kind == "unknown_kind" and out.terminal


def test_progress_reaches_the_parent(make_driver):
    d = make_driver()
    out = d.run("pool_progress", '{"steps": 3, "pause": 0.15}')
    assert isinstance(out, JobDone)
    reports = [o.progress for o in d.outcomes if isinstance(o, JobProgress)]
    assert reports and reports[-1]["total"] == 3
    assert all(r["message"].startswith("step") for r in reports)


def test_max_jobs_per_child_recycles(make_driver):
    d = make_driver(max_jobs_per_child=3, max_jobs_jitter=0.0)
    pids = [d.run("pool_pid").result_json for _ in range(7)]
    assert pids[0] == pids[1] == pids[2] != pids[3] == pids[4] == pids[5] != pids[6]
    d.until(lambda: len(d.events("recycled")) >= 2)  # the second may not be reaped yet
    assert not [o for o in d.outcomes if isinstance(o, JobFailed)]


def test_crash_loop_at_import_halts_instead_of_forking_forever():
    d = Driver(size=2, crash_loop_limit=3, child_imports=("pool_no_such_module",))
    d.pool.start()
    try:
        with pytest.raises(PoolHalted, match="No module named 'pool_no_such_module'"):
            d.until(lambda: False, timeout=15.0)
        assert len(d.events("spawned")) <= 3 + 2
    finally:
        d.pool.kill_all()
        d.until(lambda: d.pool.alive() == 0, timeout=5.0)


PARENT_SCRIPT = textwrap.dedent("""
    import selectors, sys, time
    import pool_handlers
    from supervisor.pool import Pool, PoolSettings
    sel = selectors.DefaultSelector()
    pool = Pool(PoolSettings(size=2), sel)
    pool.start()
    while pool.idle_count() < 2:
        for key, mask in sel.select(0.1):
            pool.handle_event(key, mask)
    print(" ".join(str(pid) for pid in pool._children), flush=True)
    time.sleep(60)
""")


def test_parent_killed_with_sigkill_takes_its_children_along():
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    parent = subprocess.Popen([sys.executable, "-c", PARENT_SCRIPT], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and not any(gone(pid) for pid in pids)
        parent.kill()
        parent.wait()
        wait_gone(pids)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


def own_children() -> set[int]:
    kids: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            kids.update(int(p) for p in f.read().split())
    return kids


@pytest.mark.slow
@pytest.mark.timeout(60)
def open_fds() -> dict[str, str]:
    """This process's fds and what each is (``pipe:[inode]``, a file's path, ...)."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # closed meanwhile (the listing's own fd, or another thread's)
    return found


def test_thousand_jobs_through_two_children_leave_no_fd_or_zombie():
    fds_before = open_fds()
    kids_before = own_children()
    d = Driver(size=2)
    d.start()
    pending = [d.job("pool_echo", f'{{"value": {i}}}') for i in range(1000)]
    pending.reverse()
    while pending or d.pool.busy_count():
        while pending and d.pool.idle_count():
            d.pool.dispatch(pending.pop())
        d.turn()
    done = [o for o in d.outcomes if isinstance(o, JobDone)]
    assert len(done) == 1000
    assert sorted(int(o.result_json) for o in done) == list(range(1000))
    d.pool.stop()
    d.until(lambda: d.pool.alive() == 0)
    d.sel.close()
    assert own_children() - kids_before == set()  # no child, live or zombie, left
    # Left open: an fd that was not open before, or is now something else. One that
    # closed meanwhile is not ours (an earlier test's connection collected in this
    # worker process closed two in one CI run).
    leaked = {fd: what for fd, what in open_fds().items() if fds_before.get(fd) != what}
    assert leaked == {}


def test_sigterm_reaches_the_child_even_if_parent_handlers_were_installed(make_driver):
    # The parent's handlers only record signals; a child must die of SIGTERM.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        d = make_driver()
    finally:
        signal.signal(signal.SIGTERM, previous)
    out = d.run("pool_sleep", '{"seconds": 30}', timeout=0.3)
    assert out.kind == "timeout"
    exited = [e for e in d.events("exited") if "SIGTERM" in e.detail]
    assert exited, d.events("exited")


def test_process_titles_show_the_job_then_idle(make_driver):
    d = make_driver()
    pid = int(d.run("pool_pid").result_json)
    job = d.job("pool_sleep", '{"seconds": 0.6}')
    assert d.pool.dispatch(job)
    wanted = f"supervisor: worker 1 job {job.id} pool_sleep (attempt 1)"
    d.until(lambda: cmdline(pid) == wanted)
    d.until(lambda: d.finished(job.id) is not None)
    d.until(lambda: cmdline(pid) == "supervisor: worker 1 idle")


def test_child_keeps_only_stdio_and_its_two_pipe_ends(make_driver, tmp_path):
    opened = [open(tmp_path / f"f{i}", "w") for i in range(3)]  # noqa: SIM115
    try:
        d = make_driver()
        fds = orjson.loads(d.run("pool_fds").result_json)
    finally:
        for f in opened:
            f.close()
    # 0, 1, 2, the two pipe ends, the fd listdir itself opened, the output capture's
    # three (the supervisor's stderr, the read ends of fds 1 and 2), and the usage
    # meter's three /proc files (workers/usage.py).
    assert len(fds) <= 12 and fds[:3] == [0, 1, 2]
