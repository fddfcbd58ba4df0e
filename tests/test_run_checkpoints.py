"""Checkpoints and stop notices through real supervisors (issue 28): a long job drained
by SIGTERM resumes on the next supervisor from its checkpoint, on the same attempt and
without an errors entry; after a SIGKILL it resumes from the last checkpoint written;
handlers are told before the kill (``Stopping`` or ``stopping``), and one that ignores
both is killed at the end of the grace as before."""

import signal

import pytest
from click.testing import CliRunner
from e2e import Supervisor, job_row, read_log, wait_until

from shared.enqueue import enqueue
from supervisor.cli import main

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # real supervisors: CI lane

APP = "checkpoint_handlers"


def records(log, job_id, event=None):
    return [r for r in read_log(log) if r["id"] == job_id and (event is None
                                                                or r["event"] == event)]


def run_time(log, job_id):
    """The handler's own account of how long it ran, over every run of the job."""
    return sum(r["ran"] for r in records(log, job_id) if r["event"] in ("stopping", "end"))


def test_a_drained_long_job_resumes_from_its_checkpoint_on_the_same_attempt(dsn, tmp_path):
    log = tmp_path / "runs.log"
    job_id = enqueue("ck_batch", {"steps": 12, "step": 1.0}, dsn=dsn)
    first = Supervisor(dsn, "-n", "1", "--grace", "2", log_path=log, app=APP)
    try:
        wait_until(lambda: any(r["done"] >= 5 for r in records(log, job_id, "step")),
                   timeout=60, what="five steps done")
        first.signal(signal.SIGTERM)
        assert first.wait(30) == 0, first.err
    finally:
        first.stop()
    stopped = records(log, job_id, "stopping")
    assert len(stopped) == 1, first.err  # told, and it handed the job back
    row = job_row(dsn, job_id)
    assert row["state"] == "available" and row["attempt"] == 0 and row["errors"] == []
    assert row["checkpoint"] == {"done": stopped[0]["done"]}
    assert row["checkpoint_at"] is not None

    second = Supervisor(dsn, "-n", "1", "--burst", log_path=log, app=APP)
    assert second.wait(60) == 0, second.err
    row = job_row(dsn, job_id)
    assert row["state"] == "completed" and row["result"] == {"done": 12}
    assert row["attempt"] == 1 and row["errors"] == []
    starts = records(log, job_id, "start")
    assert [s["attempt"] for s in starts] == [1, 1]
    assert starts[1]["resumed"] and starts[1]["done"] == stopped[0]["done"]
    assert run_time(log, job_id) < 12 + 3  # no step ran twice


def test_after_a_sigkill_the_rescued_job_resumes_from_the_last_checkpoint_written(
        dsn, tmp_path):
    log = tmp_path / "runs.log"
    config = tmp_path / "supervisor.toml"
    config.write_text("maintenance_interval = 0.5\npoll_interval = 0.2\n")
    # Half-second steps: nothing here is timed by the step (the kill comes once a
    # checkpoint of four is written, the rescue once the 3 s lease has expired).
    job_id = enqueue("ck_batch", {"steps": 12, "step": 0.5}, dsn=dsn)
    args = ("-n", "1", "--lease-ttl", "3", "--config", str(config))
    first = Supervisor(dsn, *args, log_path=log, app=APP)
    try:
        wait_until(lambda: (job_row(dsn, job_id).get("checkpoint") or {}).get("done", 0) >= 4,
                   timeout=60, what="a checkpoint of four steps written")
        first.signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.stop()
    # What the dead supervisor wrote last: its children died with it, nothing comes later.
    written = job_row(dsn, job_id)["checkpoint"]
    assert written["done"] >= 4
    # Not --burst: a job under a dead lease is not available work until it is rescued.
    second = Supervisor(dsn, *args, log_path=log, app=APP)
    try:
        wait_until(lambda: job_row(dsn, job_id)["state"] == "completed", timeout=60,
                   what="the rescued job completed")
        second.signal(signal.SIGTERM)
        assert second.wait(30) == 0, second.err
    finally:
        second.stop()
    row = job_row(dsn, job_id)
    assert row["result"] == {"done": 12}
    starts = records(log, job_id, "start")
    assert len(starts) == 2
    assert starts[1]["resumed"] and starts[1]["done"] == written["done"]
    assert [e["kind"] for e in row["errors"]] == ["lease_expired"]  # a rescue counts


def test_every_handler_is_told_before_the_kill_and_one_that_ignores_it_is_killed(
        dsn, tmp_path):
    log = tmp_path / "runs.log"
    raising = enqueue("ck_batch", {"steps": 600, "step": 0.1}, dsn=dsn)
    flag = enqueue("ck_flag", dsn=dsn)
    deaf = enqueue("ck_ignore", dsn=dsn)
    sup = Supervisor(dsn, "-n", "3", "--grace", "3", log_path=log, app=APP)
    try:
        wait_until(lambda: all(records(log, i, "start") for i in (raising, flag, deaf))
                   and records(log, raising, "step"), timeout=60, what="three jobs running")
        sup.signal(signal.SIGTERM)
        assert sup.wait(30) == 0, sup.err
    finally:
        sup.stop()
    # Seen before the kill: each wrote its record from inside the handler.
    assert len(records(log, raising, "stopping")) == 1
    assert [r["reason"] for r in records(log, flag, "saw_stopping")] == ["drain"]
    assert len(records(log, flag, "flushed")) == 1  # the parent answered the flush
    for job_id in (raising, flag):
        row = job_row(dsn, job_id)
        assert (row["state"], row["attempt"], row["errors"]) == ("available", 0, [])
        assert row["checkpoint"] is not None
    row = job_row(dsn, deaf)
    assert row["state"] == "available" and row["attempt"] == 0
    assert [e["kind"] for e in row["errors"]] == ["shutdown"]  # killed at the grace's end


def test_a_cancelled_job_is_told_and_hands_itself_back_before_the_kill(dsn, tmp_path):
    log = tmp_path / "runs.log"
    job_id = enqueue("ck_flag", dsn=dsn)
    sup = Supervisor(dsn, "-n", "1", log_path=log, app=APP)
    try:
        wait_until(lambda: records(log, job_id, "start"), timeout=60, what="job start")
        children = sup.children()
        result = CliRunner().invoke(main, ["jobs", "cancel", str(job_id), "--dsn", dsn])
        assert result.exit_code == 0, result.output
        wait_until(lambda: records(log, job_id, "saw_stopping"), timeout=30,
                   what="the handler told of the cancel")
        # It handed the job back itself: its child lives on and takes the next job.
        after = enqueue("ck_flush", {"n": 1}, dsn=dsn)
        wait_until(lambda: job_row(dsn, after)["state"] == "completed", timeout=30,
                   what="the next job done")
        assert set(children) <= set(sup.children())
    finally:
        sup.signal(signal.SIGTERM)
        sup.wait(30)
        sup.stop()
    assert [r["reason"] for r in records(log, job_id, "saw_stopping")] == ["cancel"]
    assert job_row(dsn, job_id)["state"] == "cancelled"


def test_bad_checkpoint_states_are_refused_in_the_handler_and_nothing_is_stored(
        dsn, tmp_path):
    log = tmp_path / "runs.log"
    job_id = enqueue("ck_bad_states", dsn=dsn)
    flushed = enqueue("ck_flush", {"n": 3}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "1", "--burst", log_path=log, app=APP)
    assert sup.wait(60) == 0, sup.err
    row = job_row(dsn, job_id)
    assert row["state"] == "completed" and row["result"] == {"refused": 3}
    assert row["checkpoint"] is None and row["checkpoint_at"] is None
    messages = records(log, job_id, "refused")[0]["messages"]
    assert "cannot be encoded as JSON" in messages[0]
    assert "not a finite number" in messages[1]
    size = len(b'{"big":""}') + (2 << 20)
    assert f"is {size} bytes of JSON, over the {1 << 20}-byte cap" in messages[2]
    assert job_row(dsn, flushed)["checkpoint"] == {"i": 3}
    assert len(records(log, flushed, "flushed")) == 3
