"""Real children whose handlers or inputs misbehave: every fault must stay with the job
that caused it (issue 10, "answers belong to their job", "bad input stays with its
job", "titles follow the job"). Each test waits for a condition with a deadline."""

from __future__ import annotations

import orjson
import pool_handlers  # noqa: F401  (handlers are imported before forking, as --app does)
import pytest
from pool_driver import cmdline, drivers_made

from supervisor.pool import JobDone, JobFailed

pytestmark = pytest.mark.timeout(30)

_make_driver = pytest.fixture(name="make_driver")(drivers_made)


def answers_per_job(d) -> dict[int, int]:
    counts: dict[int, int] = {}
    for o in d.outcomes:
        if isinstance(o, JobDone | JobFailed):
            counts[o.job.id] = counts.get(o.job.id, 0) + 1
    return counts


def test_a_forked_copy_that_returns_never_answers(make_driver):
    d = make_driver()
    pid = d.run("pool_pid").result_json
    out = d.run("pool_fork_and_return", '{"seconds": 0.3}')
    assert isinstance(out, JobDone), out
    assert orjson.loads(out.result_json) == {"by": "original", "pid": int(pid)}
    for _ in range(5):  # the copy must not take (or answer) the next jobs either
        assert d.run("pool_pid").result_json == pid
    assert set(answers_per_job(d).values()) == {1}


def test_a_forked_copy_that_returns_late_never_answers_for_the_next_job(make_driver):
    d = make_driver()
    pid = d.run("pool_pid").result_json
    out = d.run("pool_fork_and_return", '{"seconds": 0, "copy_seconds": 0.2}')
    assert orjson.loads(out.result_json) == {"by": "original", "pid": int(pid)}
    # Jobs that run while the copy wakes up and returns get their own results.
    for n in range(8):
        nxt = d.run("pool_sleep", '{"seconds": 0.05}')
        assert isinstance(nxt, JobDone) and nxt.result_json == "0.05", (n, nxt)
    assert set(answers_per_job(d).values()) == {1}


@pytest.mark.parametrize(("args", "problem"), [
    ('{"value": 1e400}', "infinity"),
    ('{"value": ' + "[" * 2000 + "]" * 2000 + "}", "depth"),
])
def test_args_orjson_cannot_parse_fail_that_job_and_the_child_lives(make_driver, args,
                                                                    problem):
    d = make_driver()
    pid = d.run("pool_pid").result_json
    out = d.run("pool_echo", args)
    assert isinstance(out, JobFailed), out
    assert (out.kind, out.terminal) == ("args", True) and problem in out.message
    assert d.run("pool_pid").result_json == pid


def test_args_over_the_frame_cap_fail_that_job_at_once(make_driver):
    d = make_driver(max_frame_bytes=1000)
    pid = d.run("pool_pid").result_json
    out = d.run("pool_echo", orjson.dumps({"value": "x" * 2000}).decode())
    assert isinstance(out, JobFailed), out
    assert (out.kind, out.terminal) == ("args", True) and "1000-byte" in out.message
    assert d.run("pool_pid").result_json == pid


@pytest.mark.parametrize("which", ["low", "read", "write-replaced"])
def test_a_handler_that_closes_the_job_pipe_costs_only_its_own_job(make_driver, which):
    d = make_driver()
    d.run("pool_pid")
    own = d.run("pool_close_fds", orjson.dumps({"which": which}).decode())
    if which == "read":  # it can still answer: its job counts, and the child leaves
        assert isinstance(own, JobDone), own
    elif which == "write-replaced":  # no answer into the file now holding that fd
        assert isinstance(own, JobFailed) and own.kind == "crashed", own
        assert "closed its job pipe" in own.message
    for _ in range(3):
        nxt = d.run("pool_pid")
        assert isinstance(nxt, JobDone), nxt


def test_progress_json_cannot_hold_is_refused_in_the_handler(make_driver):
    d = make_driver()
    out = d.run("pool_bad_progress")
    assert isinstance(out, JobDone), out
    assert "refused" in out.result_json and "Decimal" in out.result_json
    out = d.run("pool_bad_progress", '{"catch": false}')
    assert isinstance(out, JobFailed) and out.kind == "error", out
    assert "progress" in out.message


def test_the_title_shows_the_job_long_before_the_first_heartbeat(make_driver):
    d = make_driver(heartbeat_interval=5.0, heartbeat_timeout=30.0)
    pid = int(d.run("pool_pid").result_json)
    job = d.job("pool_sleep", '{"seconds": 1.2}')
    assert d.pool.dispatch(job)
    wanted = f"supervisor: worker 1 job {job.id} pool_sleep (attempt 1)"
    d.until(lambda: cmdline(pid) == wanted, timeout=1.0)
    d.until(lambda: d.finished(job.id) is not None)
    d.until(lambda: cmdline(pid) == "supervisor: worker 1 idle", timeout=1.0)
