"""`supervisor jobs list|show|retry|cancel` against a real database, and cancelling a
job that a real supervisor is running."""

from __future__ import annotations

import signal

import orjson
import pytest
from click.testing import CliRunner
from e2e import Supervisor, job_row, read_log, wait_until

from shared.enqueue import enqueue
from supervisor.admin import jobs as admin_jobs
from supervisor.cli.main import main

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]  # processes or waits: CI lane

TRACEBACK = 'Traceback (most recent call last):\n  File "app.py", line 3\nValueError: boom'


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def one_error_line(result, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("supervisor: error: "), result.output
    return lines[0]


def add(conn, kind="k", queue="default", state="available", unique_key=None, attempt=0,
        errors=()) -> int:
    finished = "now()" if state in ("completed", "discarded", "cancelled") else "NULL"
    owner = "'sup-1'" if state == "running" else "NULL"
    return conn.execute(
        "INSERT INTO supervisor.jobs (kind, queue, state, unique_key, attempt, errors, "
        f"finished_at, lease_owner) VALUES (%s, %s, %s, %s, %s, %s, {finished}, {owner}) "
        "RETURNING id",
        (kind, queue, state, unique_key, attempt, orjson.dumps(list(errors)).decode()),
    ).fetchone()[0]


def error(attempt: int, message: str, traceback: str | None = TRACEBACK) -> dict:
    return {"attempt": attempt, "kind": "error", "message": message, "traceback": traceback,
            "at": "2025-01-01T00:00:00+00:00", "supervisor": "sup-1"}


def test_list_filters_limit_and_newest_first(dsn, conn):
    a = add(conn, "resize", "images")
    b = add(conn, "resize", "images", "discarded", attempt=3,
            errors=[error(3, "ValueError: boom\nsecond line")])
    c = add(conn, "mail", "images")
    d = add(conn, "resize", "other")

    def ids(*args):
        result = invoke("jobs", "list", "--json", "--dsn", dsn, *args)
        assert result.exit_code == 0, result.output
        return [row["id"] for row in orjson.loads(result.stdout)]

    assert ids() == [d, c, b, a]
    assert ids("--queue", "images") == [c, b, a]
    assert ids("--queue", "images", "--kind", "resize") == [b, a]
    assert ids("--state", "discarded") == [b]
    assert ids("--limit", "2") == [d, c]

    text = invoke("jobs", "list", "--queue", "images", "--kind", "resize", "--dsn", dsn).output
    lines = text.splitlines()
    assert lines[0].split() == ["ID", "KIND", "QUEUE", "STATE", "ATTEMPT", "PRIO", "WHEN",
                                "LAST", "ERROR"]
    assert lines[1].split()[:5] == [str(b), "resize", "images", "discarded", "3/-"]
    assert lines[1].endswith("ValueError: boom")  # the first line of the message only
    assert lines[2].split()[:4] == [str(a), "resize", "images", "available"]
    assert invoke("jobs", "list", "--kind", "nothing", "--dsn", dsn).output == "no jobs match\n"


def test_show_has_every_attempt_with_its_traceback(dsn, conn):
    job_id = add(conn, "resize", state="retryable", attempt=2,
                 errors=[error(1, "first failure"), error(2, "second failure")])
    conn.execute("UPDATE supervisor.jobs SET args = '{\"path\": \"a.png\"}', "
                 "progress = '{\"done\": 2, \"total\": 3}' WHERE id = %s", (job_id,))
    result = invoke("jobs", "show", str(job_id), "--dsn", dsn)
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith(f"job {job_id}: resize in queue default is retryable")
    assert '"path":"a.png"' in out and '"total":3' in out
    assert "attempt 1 error" in out and "first failure" in out and "second failure" in out
    assert out.count('File "app.py", line 3') == 2

    as_json = orjson.loads(invoke("jobs", "show", str(job_id), "--json", "--dsn", dsn).output)
    assert as_json["errors"][1]["traceback"] == TRACEBACK
    assert as_json["args"] == {"path": "a.png"} and as_json["progress"]["done"] == 2


def test_retry_of_a_discarded_job_gives_it_a_full_set_of_attempts(dsn, conn):
    job_id = add(conn, state="discarded", attempt=20, errors=[error(20, "boom")])
    result = invoke("jobs", "retry", str(job_id), "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert result.output == f"retried job {job_id} (was discarded); it is available now\n"
    row = job_row(dsn, job_id)
    assert (row["state"], row["attempt"], row["finished_at"]) == ("available", 0, None)
    assert row["errors"] == [error(20, "boom")]  # history kept
    assert conn.execute("SELECT run_at <= now() FROM supervisor.jobs WHERE id = %s",
                        (job_id,)).fetchone()[0]


@pytest.mark.parametrize("state", ["running", "completed", "available"])
def test_retry_refuses_jobs_in_other_states(dsn, conn, state):
    job_id = add(conn, state=state)
    line = one_error_line(invoke("jobs", "retry", str(job_id), "--dsn", dsn), 1)
    assert line.endswith(f"job {job_id} is {state}; only discarded, cancelled or retryable "
                         "jobs can be retried")
    assert job_row(dsn, job_id)["state"] == state


def test_retry_colliding_with_a_live_unique_key_is_one_line(dsn, conn):
    old = add(conn, state="discarded", unique_key="report-7")
    live = add(conn, state="available", unique_key="report-7")
    line = one_error_line(invoke("jobs", "retry", str(old), "--dsn", dsn), 1)
    assert line == (f"supervisor: error: job {old} cannot be retried: job {live} (available) "
                    "holds its unique key 'report-7'")
    assert job_row(dsn, old)["state"] == "discarded"


def test_bulk_retry_needs_a_state_and_skips_taken_keys(dsn, conn):
    for args in ([], ["--queue", "images"], ["--state", "completed"], ["--state", "bogus"]):
        one_error_line(invoke("jobs", "retry", *args, "--dsn", dsn), 2)
    one_error_line(invoke("jobs", "retry", "1", "--state", "discarded", "--dsn", dsn), 2)

    plain = [add(conn, queue="images", state="discarded") for _ in range(3)]
    other_queue = add(conn, queue="mail", state="discarded")
    cancelled = add(conn, queue="images", state="cancelled")
    taken = add(conn, queue="images", state="discarded", unique_key="held")
    add(conn, queue="images", state="scheduled", unique_key="held")
    twins = [add(conn, queue="images", state="discarded", unique_key="twin") for _ in range(2)]

    result = invoke("jobs", "retry", "--state", "discarded", "--queue", "images", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert result.output == ("retried 4 discarded jobs; skipped 2 whose unique key another "
                             "live job holds\n")
    states = {i: job_row(dsn, i)["state"] for i in [*plain, other_queue, cancelled, taken,
                                                    *twins]}
    assert [states[i] for i in plain] == ["available"] * 3
    assert states[other_queue] == "discarded" and states[cancelled] == "cancelled"
    assert states[taken] == "discarded"
    assert sorted(states[i] for i in twins) == ["available", "discarded"]


def test_cancel_an_available_job(dsn, conn):
    job_id = add(conn)
    result = invoke("jobs", "cancel", str(job_id), "--dsn", dsn)
    assert result.output == f"cancelled job {job_id} (was available)\n"
    row = job_row(dsn, job_id)
    assert row["state"] == "cancelled" and row["finished_at"] is not None
    assert [(e["kind"], e["message"]) for e in row["errors"]] == [
        ("cancelled", "cancelled by operator")]
    line = one_error_line(invoke("jobs", "cancel", str(job_id), "--dsn", dsn), 1)
    assert line.endswith(f"job {job_id} is already cancelled; only unfinished jobs can be "
                         "cancelled")


def test_cancel_of_a_running_job_notifies_in_the_same_transaction(dsn, conn):
    job_id = add(conn, state="running")
    conn.execute("LISTEN supervisor_cancel")
    result = invoke("jobs", "cancel", str(job_id), "--dsn", dsn)
    assert result.output == f"cancelled job {job_id} (was running; its supervisor was told)\n"
    notes = list(conn.notifies(timeout=5, stop_after=1))
    assert [(n.channel, n.payload) for n in notes] == [("supervisor_cancel", str(job_id))]
    row = job_row(dsn, job_id)
    assert (row["state"], row["lease_owner"]) == ("cancelled", None)
    assert row["errors"][-1]["supervisor"] == "sup-1"


@pytest.mark.parametrize("args, code, message", [
    (["list", "--state", "finished"], 2, "unknown state 'finished'"),
    (["list", "--limit", "0"], 2, "--limit is a positive integer"),
    (["show", "abc"], 2, "a job id is a positive integer; got 'abc'"),
    (["retry", "0"], 2, "a job id is a positive integer; got '0'"),
    (["cancel", "99999999999999999999"], 2, "a job id is a positive integer"),
    (["show", "424242"], 1, "no job with id 424242"),
    (["retry", "424242"], 1, "no job with id 424242"),
    (["cancel", "424242"], 1, "no job with id 424242"),
])
def test_bad_input_is_one_line_with_the_right_exit_code(dsn, args, code, message):
    result = invoke("jobs", *args, "--dsn", dsn)
    assert message in one_error_line(result, code)


@pytest.mark.slow
def test_cancel_kills_exactly_that_child_and_the_supervisor_goes_on(dsn, tmp_path):
    log = tmp_path / "runs.log"
    job_id = enqueue("e2e_wait_for", {"path": str(tmp_path / "never")}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "2", log_path=log)
    try:
        start = wait_until(lambda: [r for r in read_log(log) if r["event"] == "start"],
                           what="job start")[0]
        wait_until(lambda: len(sup.children()) == 2, what="two children")
        victim = start["pid"]
        bystander = next(p for p in sup.children() if p != victim)

        result = invoke("jobs", "cancel", str(job_id), "--dsn", dsn)
        assert result.output == f"cancelled job {job_id} (was running; its supervisor was told)\n"
        wait_until(lambda: victim not in sup.children(), what="the job's child to die")
        assert bystander in sup.children()
        sup.wait_for_log(f"job {job_id} cancelled by an operator")

        after = enqueue("e2e_noop", {"n": 1}, dsn=dsn)
        wait_until(lambda: job_row(dsn, after)["state"] == "completed", what="a later job")
        row = job_row(dsn, job_id)
        assert row["state"] == "cancelled"  # the supervisor's own write was fenced off
        assert [e["message"] for e in row["errors"]] == ["cancelled by operator"]
        assert not [r for r in read_log(log) if r["id"] == job_id and r["event"] == "end"]
        sup.signal(signal.SIGTERM)
        assert sup.wait(30) == 0
    finally:
        sup.stop()
    assert job_row(dsn, job_id)["state"] == "cancelled"


@pytest.mark.slow
def test_a_missed_cancel_notify_is_caught_by_the_next_lease_renewal(dsn, conn, tmp_path):
    log = tmp_path / "runs.log"
    job_id = enqueue("e2e_wait_for", {"path": str(tmp_path / "never")}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "1", "--lease-ttl", "1.5", log_path=log)
    try:
        victim = wait_until(lambda: [r for r in read_log(log) if r["event"] == "start"],
                            what="job start")[0]["pid"]
        conn.execute(admin_jobs._CANCEL, {"id": job_id})  # the cancel, without its NOTIFY
        wait_until(lambda: victim not in sup.children(), what="the job's child to die")
        after = enqueue("e2e_noop", {"n": 1}, dsn=dsn)
        wait_until(lambda: job_row(dsn, after)["state"] == "completed", what="a later job")
        assert job_row(dsn, job_id)["state"] == "cancelled"
        sup.signal(signal.SIGTERM)
        assert sup.wait(30) == 0
    finally:
        sup.stop()
