"""Every row of DESIGN's failure table, through a real ``supervisor run`` process with
real children and a real database."""

import psycopg
import pytest
from e2e import job_row, read_log, run_burst, wait_until

from shared.enqueue import enqueue, enqueue_many

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # real supervisors: CI lane

FAST = ("-n", "2", "--poll-interval", "0.1")


def test_handler_returns_completed_with_result(dsn, tmp_path):
    log = tmp_path / "runs.log"
    job_id = enqueue("e2e_typed", {"a": 2, "b": 3}, dsn=dsn)
    run_burst(dsn, *FAST, log_path=log)
    row = job_row(dsn, job_id)
    assert row["state"] == "completed"
    assert row["result"] == 5
    assert row["attempt"] == 1
    assert row["lease_owner"] is None
    assert row["finished_at"] is not None


def test_handler_raises_retries_then_discards_with_every_error(dsn, tmp_path):
    log = tmp_path / "runs.log"
    job_id = enqueue("e2e_raise", {"message": "bad pixel"}, max_attempts=2, dsn=dsn)
    row = run_until(dsn, job_id, "discarded", log)
    assert row["state"] == "discarded"
    assert [e["attempt"] for e in row["errors"]] == [1, 2]
    assert all(e["kind"] == "error" for e in row["errors"])
    assert "ValueError: bad pixel" in row["errors"][0]["traceback"]
    assert len(read_log(log)) == 2


def run_until(dsn, job_id, final_state, log):
    """Burst runs until the job reaches ``final_state``. A failure schedules its retry
    ~1 s later (backoff) and burst mode exits while nothing is due, so run again once
    the retry is due."""
    for _ in range(10):
        run_burst(dsn, *FAST, log_path=log)
        row = job_row(dsn, job_id)
        if row["state"] == final_state:
            return row
        _wait_until_due(dsn, job_id)
    return job_row(dsn, job_id)


def _wait_until_due(dsn, job_id):
    def due():
        with psycopg.connect(dsn, autocommit=True) as conn:
            return conn.execute("SELECT run_at <= now() FROM supervisor.jobs WHERE id = %s",
                                (job_id,)).fetchone()[0]

    wait_until(due, timeout=10, what="retry to be due")


def test_discard_is_terminal_at_once(dsn, tmp_path):
    job_id = enqueue("e2e_discard", dsn=dsn)
    run_burst(dsn, *FAST)
    row = job_row(dsn, job_id)
    assert row["state"] == "discarded"
    assert row["attempt"] == 1
    assert row["errors"][0]["kind"] == "discard"
    assert "not worth retrying" in row["errors"][0]["message"]


@pytest.mark.parametrize("kind, how", [("e2e_segv_once", "SIGSEGV"),
                                       ("e2e_exit_once", "exited with code 3")])
def test_child_crash_is_retried_and_child_replaced(dsn, tmp_path, kind, how):
    log = tmp_path / "runs.log"
    job_id = enqueue(kind, dsn=dsn)
    others = enqueue_many("e2e_noop", [{"n": i} for i in range(20)], dsn=dsn)
    row = run_until(dsn, job_id, "completed", log)
    assert row["state"] == "completed", row
    assert row["result"] == "survived"
    assert row["errors"][0]["kind"] == "crashed"
    assert how in row["errors"][0]["message"]
    assert all(job_row(dsn, i)["state"] == "completed" for i in others)


def test_job_timeout_kills_and_retries(dsn, tmp_path):
    log = tmp_path / "runs.log"
    job_id = enqueue("e2e_too_slow", max_attempts=1, dsn=dsn)
    sup = run_burst(dsn, *FAST, "--grace", "5", log_path=log)
    row = job_row(dsn, job_id)
    assert row["state"] == "discarded"  # max_attempts=1: the timeout used the only attempt
    assert row["errors"][0]["kind"] == "timeout"
    assert "timeout" in row["errors"][0]["message"]
    assert "e2e_too_slow" in sup.err


def test_heartbeat_silence_is_hung(dsn, tmp_path):
    config = tmp_path / "supervisor.toml"
    config.write_text("heartbeat_interval = 0.2\nheartbeat_timeout = 1.5\n")
    job_id = enqueue("e2e_hang_in_c", max_attempts=1, dsn=dsn)
    run_burst(dsn, *FAST, "--config", str(config))
    row = job_row(dsn, job_id)
    assert row["state"] == "discarded"
    assert row["errors"][0]["kind"] == "hung"


def test_native_code_holding_the_gil_but_using_cpu_completes(dsn, tmp_path):
    # The regex holds the GIL for about 8 s (longer under load), so the heartbeat
    # thread starves for well over the 3 s timeout; its CPU time keeps moving, so
    # the child is busy, not hung (issue 26; before, it was killed as hung, twice).
    log = tmp_path / "runs.log"
    job_id = enqueue("e2e_regex_busy", {"seconds": 8.0}, dsn=dsn)
    sup = run_burst(dsn, *FAST, "--heartbeat-timeout", "3", log_path=log, timeout=110)
    row = job_row(dsn, job_id)
    assert row["state"] == "completed", (row["errors"], sup.err[-2000:])
    assert row["result"] is False and row["attempt"] == 1
    assert len(read_log(log)) == 1
    assert "holds the GIL in native code" in sup.err


def test_args_that_do_not_bind_are_discarded_at_once(dsn):
    job_id = enqueue("e2e_typed", {"a": 1, "c": 2}, dsn=dsn)
    run_burst(dsn, *FAST)
    row = job_row(dsn, job_id)
    assert row["state"] == "discarded"
    assert row["attempt"] == 1
    assert row["errors"][0]["kind"] == "binding"


def test_bad_results_fail_cleanly_and_the_child_survives(dsn, tmp_path):
    log = tmp_path / "runs.log"
    bad = enqueue("e2e_unserializable", max_attempts=1, dsn=dsn)
    huge = enqueue("e2e_huge_result", {"size": 4 << 20}, max_attempts=1, dsn=dsn)
    after = enqueue_many("e2e_noop", [{"n": i} for i in range(10)], dsn=dsn)
    run_burst(dsn, "-n", "1", "--poll-interval", "0.1", log_path=log)
    for job_id in (bad, huge):
        row = job_row(dsn, job_id)
        assert row["state"] == "discarded"
        assert row["errors"][0]["kind"] == "result"
    assert all(job_row(dsn, i)["state"] == "completed" for i in after)
    # One child ran everything: a bad result never cost a process.
    assert len({r["pid"] for r in read_log(log)}) == 1


def test_result_postgres_cannot_store_becomes_a_job_error(dsn):
    # JSON allows "\u0000" but jsonb does not: the batch must not wedge on it.
    fine = enqueue_many("e2e_noop", [{"n": i} for i in range(5)], dsn=dsn)
    nul = enqueue("e2e_nul_result", dsn=dsn)
    run_burst(dsn, *FAST)
    assert all(job_row(dsn, i)["state"] == "completed" for i in fine)
    row = job_row(dsn, nul)
    assert row["state"] == "discarded"
    assert row["errors"][0]["kind"] == "result"


def test_unknown_kind_is_not_claimed(dsn):
    job_id = enqueue("nobody_handles_this", {"x": 1}, dsn=dsn)
    done = enqueue("e2e_noop", dsn=dsn)
    run_burst(dsn, *FAST)
    assert job_row(dsn, done)["state"] == "completed"
    row = job_row(dsn, job_id)
    assert row["state"] == "available"
    assert row["attempt"] == 0
