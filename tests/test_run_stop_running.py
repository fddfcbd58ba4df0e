"""``supervisor queues pause NAME --stop-running`` through a real supervisor (issue 28):
the running jobs of the paused queue are told (``Stopping`` / ``stopping`` with reason
``pause``), hand themselves back with their checkpoints, or are killed after
``kill_grace``; every one goes back without spending its attempt, waits while the
queue is paused and resumes from its checkpoint after ``queues resume``. Jobs of
other queues are not told."""

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


def cli(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_pause_with_stop_running_hands_running_jobs_back_unspent_until_resume(
        dsn, tmp_path):
    log = tmp_path / "runs.log"
    config = tmp_path / "supervisor.toml"
    # grace: the SIGTERM drain at the end (cleanup, nothing asserted) kills the jobs still
    # running after 2 s instead of waiting the default 25 s for them.
    config.write_text("kill_grace = 1.5\npoll_interval = 0.2\ngrace = 2\n")
    raising = enqueue("ck_batch", {"steps": 600, "step": 0.1}, dsn=dsn)
    flag = enqueue("ck_flag", dsn=dsn)
    deaf = enqueue("ck_ignore", dsn=dsn)
    elsewhere = enqueue("ck_flag", {"limit": 60.0}, queue="other", dsn=dsn)
    sup = Supervisor(dsn, "-n", "4", "-q", "default", "-q", "other", "--config",
                     str(config), log_path=log, app=APP)
    try:
        wait_until(lambda: all(records(log, i, "start")
                               for i in (raising, flag, deaf, elsewhere))
                   and records(log, raising, "step"), timeout=60, what="four jobs running")
        out = cli("queues", "pause", "default", "--stop-running", "--dsn", dsn)
        assert "3 running jobs told to stop" in out

        def back(job_id):
            return job_row(dsn, job_id)["state"] == "available"
        wait_until(lambda: all(back(i) for i in (raising, flag, deaf)), timeout=30,
                   what="the paused queue's running jobs back")
        # Told before the kill: each record was written inside its handler.
        assert len(records(log, raising, "stopping")) == 1
        assert [r["reason"] for r in records(log, flag, "saw_stopping")] == ["pause"]
        for job_id in (raising, flag):
            row = job_row(dsn, job_id)
            assert (row["attempt"], row["errors"]) == (0, []), row
            assert row["checkpoint"] is not None
        row = job_row(dsn, deaf)  # ignored the notice: killed after kill_grace, unspent
        assert row["attempt"] == 0
        assert [e["kind"] for e in row["errors"]] == ["shutdown"]
        assert "paused with --stop-running" in row["errors"][0]["message"]
        # The other queue's job was not told and runs on.
        assert records(log, elsewhere, "saw_stopping") == []
        assert job_row(dsn, elsewhere)["state"] == "running"
        # Paused: nothing of the queue starts again until it is resumed.
        assert len(records(log, raising, "start")) == 1

        cli("queues", "resume", "default", "--dsn", dsn)
        wait_until(lambda: len(records(log, raising, "start")) == 2, timeout=30,
                   what="the stopped job resumed")
        again = records(log, raising, "start")[1]
        stopped_at = records(log, raising, "stopping")[0]["done"]
        assert again["resumed"] and again["done"] == stopped_at and again["attempt"] == 1
        wait_until(lambda: len(records(log, flag, "start")) == 2, timeout=30,
                   what="the flag job resumed")
        assert records(log, flag, "start")[1]["resumed"] is not None
    finally:
        sup.signal(signal.SIGTERM)
        sup.wait(30)
        sup.stop()


def test_a_plain_pause_of_a_queue_keeps_its_stop_running_flag_and_resume_clears_it(conn,
                                                                                   dsn):
    def flags():
        return conn.execute("SELECT paused, stop_running FROM supervisor.queues "
                            "WHERE name = 'q'").fetchone()
    cli("queues", "pause", "q", "--dsn", dsn)
    assert flags() == (True, False)
    cli("queues", "pause", "q", "--stop-running", "--dsn", dsn)
    assert flags() == (True, True)
    cli("queues", "pause", "q", "--dsn", dsn)  # does not take the order back
    assert flags() == (True, True)
    assert "paused, stopping running" in cli("queues", "list", "--dsn", dsn)
    cli("queues", "resume", "q", "--dsn", dsn)
    assert flags() == (False, False)


def test_a_job_inside_a_gil_holding_native_call_is_killed_after_kill_grace_unspent(
        dsn, tmp_path):
    # A real pipeline's handler spends its time in C (numpy, a regex, a codec) holding
    # the GIL: the notice cannot reach it and its child's heartbeat thread cannot run,
    # so the parent's kill after kill_grace is what stops it. The call lasts 8 s; the
    # grace is 1 s: a job still there to record its return was never killed.
    log = tmp_path / "runs.log"
    config = tmp_path / "supervisor.toml"
    config.write_text("kill_grace = 1\npoll_interval = 0.2\ngrace = 2\n")  # grace: as above
    native = enqueue("ck_native", {"seconds": 8.0}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "2", "--config", str(config), log_path=log, app=APP)
    try:
        wait_until(lambda: records(log, native, "start"), timeout=60,
                   what="the native job running")
        out = cli("queues", "pause", "default", "--stop-running", "--dsn", dsn)
        assert "1 running jobs told to stop" in out
        wait_until(lambda: job_row(dsn, native)["state"] == "available", timeout=30,
                   what="the killed job back in its queue")
        row = job_row(dsn, native)
        assert row["attempt"] == 0, row  # unspent: the pause stopped it, not the job
        assert [e["kind"] for e in row["errors"]] == ["shutdown"], (row, sup.err[-3000:])
        assert records(log, native, "native_returned") == []
        assert records(log, native, "stopping") == []  # never reached a bytecode boundary

        enqueue("ck_flag", {"limit": 0.1}, queue="other", dsn=dsn)  # the pool recovered
        cli("queues", "resume", "default", "--dsn", dsn)
        wait_until(lambda: len(records(log, native, "start")) == 2, timeout=30,
                   what="the job started again after resume")
    finally:
        sup.signal(signal.SIGTERM)
        sup.wait(30)
        sup.stop()
