"""Operations through real supervisors: lease rescue after SIGKILL, maintenance taken
over by a survivor, pruning by retention, pause while running, and a metrics scrape."""

import re
import signal
import socket
import time
import urllib.request

import psycopg
import pytest
from e2e import Supervisor, job_row, read_log, run_burst, state_counts, wait_until

from shared.enqueue import enqueue, enqueue_many

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # real supervisors: CI lane


def fast_maintenance(tmp_path, **extra):
    config = tmp_path / "supervisor.toml"
    lines = ["maintenance_interval = 0.3", "poll_interval = 0.2"]
    lines += [f"{k} = {v}" for k, v in extra.items()]
    config.write_text("\n".join(lines) + "\n")
    return str(config)


def test_sigkilled_supervisors_job_is_rescued_by_another(dsn, tmp_path):
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    job_id = enqueue("e2e_wait_for", {"path": str(gate)}, dsn=dsn)
    first = Supervisor(dsn, "-n", "1", "--lease-ttl", "2", "--config", fast_maintenance(tmp_path),
                       log_path=log)
    try:
        wait_until(lambda: read_log(log), what="job start")
        # Rescue charges an attempt that started; a start is recorded within a flush.
        wait_until(lambda: job_row(dsn, job_id)["attempted_at"], what="the start recorded")
        first.signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.stop()
    killed_at = time.monotonic()
    gate.touch()  # the rerun may finish at once
    second = Supervisor(dsn, "-n", "1", "--config", fast_maintenance(tmp_path), log_path=log)
    try:
        wait_until(lambda: job_row(dsn, job_id)["state"] == "completed", timeout=30,
                   what="rescued job to complete")
        rescue_seconds = time.monotonic() - killed_at
        second.wait_for_log("rescued 1 jobs")
        second.signal(signal.SIGTERM)
        assert second.wait(30) == 0
    finally:
        second.stop()
    row = job_row(dsn, job_id)
    assert row["attempt"] == 2
    assert row["errors"][0]["kind"] == "lease_expired"
    assert row["errors"][0]["supervisor"]  # names the lost supervisor
    assert rescue_seconds < 2 + 0.3 + 5  # lease + maintenance interval + backoff/poll slack


def test_maintenance_goes_on_when_a_supervisor_dies(dsn, tmp_path):
    """Two supervisors; the one running the job is killed; the survivor rescues it."""
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    config = fast_maintenance(tmp_path)
    job_id = enqueue("e2e_wait_for", {"path": str(gate)}, dsn=dsn)
    a = Supervisor(dsn, "-n", "1", "--lease-ttl", "2", "--config", config, log_path=log)
    b = None
    try:
        wait_until(lambda: read_log(log), what="a starts the job")
        b = Supervisor(dsn, "-n", "1", "--lease-ttl", "2", "--config", config, log_path=log)
        b.wait_for_log("starting 1 children")
        wait_until(lambda: job_row(dsn, job_id)["attempted_at"], what="the start recorded")
        a.signal(signal.SIGKILL)
        a.wait(10)
        b.wait_for_log("rescued 1 jobs", timeout=30)
        gate.touch()
        wait_until(lambda: job_row(dsn, job_id)["state"] == "completed", timeout=20)
        b.signal(signal.SIGTERM)
        assert b.wait(30) == 0
    finally:
        a.stop()
        if b is not None:
            b.stop()
    pids = [r["pid"] for r in read_log(log) if r["event"] == "start"]
    assert len(set(pids)) == 2  # the rerun happened in b's child


def test_prune_removes_only_old_finished_jobs(dsn, tmp_path):
    ids = enqueue_many("nobody_runs_this", [{"i": i} for i in range(8)], dsn=dsn)
    states = ["completed", "discarded", "cancelled", "completed", "completed", "available",
              "retryable", "discarded"]
    ages = [7200, 7200, 7200, 60, 0, 7200, 7200, 30]  # seconds since finished
    with psycopg.connect(dsn, autocommit=True) as conn:
        for job_id, state, age in zip(ids, states, ages, strict=True):
            finished = state in ("completed", "discarded", "cancelled")
            conn.execute(
                "UPDATE supervisor.jobs SET state = %s, finished_at = CASE WHEN %s THEN "
                "now() - %s * interval '1 second' END, run_at = now() + interval '1 hour' "
                "WHERE id = %s", (state, finished, age, job_id))
    run_burst(dsn, "-n", "1", "--config", fast_maintenance(tmp_path, retention=3600))
    with psycopg.connect(dsn, autocommit=True) as conn:
        left = {r[0] for r in conn.execute("SELECT id FROM supervisor.jobs")}
    # The discarded job of two hours stays: discarded jobs are kept 30 days by default.
    assert left == {ids[1], ids[3], ids[4], ids[5], ids[6], ids[7]}


def test_pause_stops_claims_of_a_running_supervisor_within_a_poll(dsn, tmp_path):
    log = tmp_path / "runs.log"
    sup = Supervisor(dsn, "-n", "1", "--poll-interval", "0.2", log_path=log)
    try:
        first = enqueue("e2e_noop", dsn=dsn)
        wait_until(lambda: job_row(dsn, first)["state"] == "completed")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO supervisor.queues (name, paused) VALUES ('default', true)")
        paused = enqueue("e2e_noop", dsn=dsn)
        time.sleep(1.0)  # five polls: the absence of an event can only be waited out
        assert job_row(dsn, paused)["state"] == "available"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE supervisor.queues SET paused = false WHERE name = 'default'")
        wait_until(lambda: job_row(dsn, paused)["state"] == "completed", timeout=5)
        sup.signal(signal.SIGTERM)
        assert sup.wait(30) == 0
    finally:
        sup.stop()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_endpoint_shows_the_counts(dsn, tmp_path):
    port = free_port()
    sup = Supervisor(dsn, "-n", "2", "--metrics-port", str(port))
    try:
        ids = enqueue_many("e2e_noop", [{"n": i} for i in range(5)], dsn=dsn)
        bad = enqueue("e2e_discard", dsn=dsn)
        wait_until(lambda: state_counts(dsn) == {"completed": 5, "discarded": 1})
        assert all(job_row(dsn, i)["state"] == "completed" for i in ids)
        assert job_row(dsn, bad)["state"] == "discarded"
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        text = body.decode()
        assert re.search(r'supervisor_jobs_completed_total\{queue="default",kind="e2e_noop"\} 5',
                         text), text
        assert re.search(r'supervisor_jobs_discarded_total\{queue="default",kind="e2e_discard",'
                         r'reason="discard"\} 1', text), text
        assert re.search(r'supervisor_jobs_claimed_total\{queue="default"\} 6', text)
        assert "supervisor_job_duration_seconds_bucket" in text
        sup.signal(signal.SIGTERM)
        assert sup.wait(30) == 0
    finally:
        sup.stop()


def test_metrics_port_in_use_is_one_line_error(dsn):
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        sup = Supervisor(dsn, "-n", "1", "--metrics-port", str(s.getsockname()[1]))
        assert sup.wait(30) == 1
    lines = [line for line in sup.err.splitlines() if line.startswith("supervisor: error:")]
    assert len(lines) == 1 and "in use" in lines[0], sup.err
    assert "Traceback" not in sup.err
