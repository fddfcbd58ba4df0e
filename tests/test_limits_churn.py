"""Global limits while supervisors come and go, judged from the handlers' own start and
end records (``limits_handlers``): a rolling churn of drains and restarts must never let
more than ``--max-running`` jobs run at once, and a keyed queue whose keys are all at
their limit must pick up again as soon as one of their jobs ends, not at the next poll."""

from __future__ import annotations

import os
import signal
import time

import pytest
from click.testing import CliRunner
from e2e import Supervisor, read_log, state_counts, wait_until
from test_limits_run import peak

from shared.enqueue import enqueue_many
from supervisor.cli.main import main

APP = "limits_handlers"
# Drains and restarts, one about every second (as the issue saw them). 25 keeps the
# suite short; CHURN_CYCLES=60 runs the full minute.
CYCLES = int(os.environ.get("CHURN_CYCLES", 25))


def limit(dsn: str, *args: str) -> None:
    result = CliRunner().invoke(main, ["queues", "limit", "limited", *args, "--dsn", dsn])
    assert result.exit_code == 0, result.output


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_max_running_holds_through_a_drain_and_a_restart_every_second(dsn, tmp_path):
    """Before the fix a renewal counted only jobs whose START had come back, so a
    supervisor that had just handed jobs to its children gave their slots back and a
    neighbour took them: 5 ran against a limit of 4 for 40-380 ms."""
    log = tmp_path / "runs.log"
    limit(dsn, "--max-running", "4")
    enqueue_many("lim_work", [{"seconds": 0.05}] * 20_000, queue="limited", dsn=dsn)
    live = [Supervisor(dsn, "-n", "3", log_path=log, app=APP) for _ in range(3)]
    for sup in live:
        sup.wait_for_log("starting 3 children", timeout=60)
    draining: list[Supervisor] = []
    try:
        for _ in range(CYCLES):
            time.sleep(1.0)  # the churn's pace, not a synchronisation
            victim = live.pop(0)
            victim.signal(signal.SIGTERM)
            draining.append(victim)
            fresh = Supervisor(dsn, "-n", "3", log_path=log, app=APP)
            # SIGTERM before the handlers are installed would kill it outright.
            try:
                fresh.wait_for_log("starting 3 children", timeout=120)
            except AssertionError:
                raise AssertionError(f"a supervisor did not start: {fresh.err}") from None
            live.append(fresh)
            for sup in [s for s in draining if s.proc.poll() is not None]:
                draining.remove(sup)
                assert sup.wait(1) == 0, sup.err
        for sup in live + draining:
            sup.signal(signal.SIGTERM)
        for sup in live + draining:
            assert sup.wait(30) == 0, sup.err
    finally:
        for sup in live + draining:
            sup.stop()
    records = read_log(log)
    starts = [r for r in records if r["event"] == "start"]
    assert len(starts) > 200  # the churn did not starve the queue
    assert len({r["id"] for r in starts}) == len(starts)  # a drained job never ran twice
    assert peak(records)[None] == 4, peak(records)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_keyed_queue_at_its_key_limit_picks_up_when_a_job_of_the_key_ends(dsn, tmp_path):
    """One key, limit 2: the claim comes back short while two run, and before the fix
    the queue counted as empty until the next poll (40 jobs of 0.3 s took 19.3 s with
    the default 1 s poll, 12 s of it with nothing running). With a 3 s poll, a wake that
    waits for the poll leaves the queue idle for seconds between pairs; a wake on each
    job's end leaves it idle for a claim round trip."""
    log = tmp_path / "runs.log"
    limit(dsn, "--per-key-max-running", "2")
    enqueue_many("lim_work", [{"seconds": 0.3, "key": "k"}] * 40, queue="limited",
                 concurrency_keys=["k"] * 40, dsn=dsn)
    sup = Supervisor(dsn, "-n", "4", "--poll-interval", "3", log_path=log, app=APP)
    try:
        wait_until(lambda: state_counts(dsn).get("completed", 0) == 40, timeout=100,
                   what="the 40 keyed jobs")
        sup.signal(signal.SIGTERM)
        assert sup.wait(30) == 0, sup.err
    finally:
        sup.stop()
    records = read_log(log)
    assert peak(records, key=lambda r: r["key"])["k"] == 2
    assert idle_stretches(records) and max(idle_stretches(records)) < 1.0, \
        idle_stretches(records)


def idle_stretches(records: list[dict]) -> list[float]:
    """How long nothing ran, each time, between the first start and the last end."""
    level, idle_since, stretches = 0, None, []
    for t, step in sorted((r["t"], 1 if r["event"] == "start" else -1) for r in records):
        level += step
        if level == 0:
            idle_since = t
        elif idle_since is not None:
            stretches.append(t - idle_since)
            idle_since = None
    return stretches


def test_a_keyed_job_leaving_running_wakes_every_supervisor(dsn, conn):
    """The other supervisors learn of a freed key from the schema's NOTIFY; a job
    without a key (the hot path) sends none."""
    import psycopg

    conn.execute("""INSERT INTO supervisor.jobs (kind, queue, args, concurrency_key, state,
                    attempt, lease_owner, lease_expires_at)
                    VALUES ('k', 'keyed', '{}', 'a', 'running', 1, 'x', now() + '1 h'),
                           ('k', 'plain', '{}', NULL, 'running', 1, 'x', now() + '1 h')""")
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN supervisor_jobs")
        conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now()")
        heard = [n.payload for n in listener.notifies(timeout=2.0, stop_after=2)]
    assert heard == ["keyed"]
