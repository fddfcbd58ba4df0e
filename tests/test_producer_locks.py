"""A producer's open transaction never stalls a supervisor (issue 24, item 2).

``enqueue(..., depends_on=[running], conn=c)`` inside a transaction that stays open used
to lock the dependency's row until that transaction ended: the supervisor running the
dependency could not complete it, renew its other leases or claim, and with two
supervisors the other one rescued the stalled supervisor's jobs and ran them again.
"""

import time

import psycopg
import pytest
from e2e import Supervisor, read_log, wait_until

from shared.enqueue import enqueue, enqueue_many

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

APP = "batches_handlers"
# The supervisors' lease: short, so that holding the producer's transaction open past
# several of them takes seconds (leases renew every LEASE / 3; tests elsewhere run 2-3 s).
LEASE = 4.0
# Seconds the producer's transaction stays open: past four leases, long enough for the
# checks below (about 10 s) with room to spare on a loaded machine.
HOLD = 5 * LEASE


def states(dsn, ids):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return dict(conn.execute("SELECT id, state FROM supervisor.jobs WHERE id = ANY(%s)",
                                 (list(ids),)).fetchall())


def test_a_producer_transaction_held_open_past_four_leases_stalls_nobody(dsn, tmp_path):
    log = tmp_path / "runs.log"
    config = tmp_path / "supervisor.toml"
    config.write_text("maintenance_interval = 0.5\npoll_interval = 0.2\n")
    sups = [Supervisor(dsn, "-n", "3", "-q", "bt", "--lease-ttl", str(LEASE), "--config",
                       str(config), log_path=log, app=APP) for _ in range(2)]
    producer = psycopg.connect(dsn)  # a transaction, left open below
    try:
        # Jobs that outlive the lease (each needs renewals) on both supervisors, and the
        # dependency, which finishes while the producer's transaction is open.
        long_ids = enqueue_many("bt_member", [{"n": i, "sleep": 1.75 * LEASE} for i in range(4)],
                                queue="bt", dsn=dsn)
        dependency = enqueue("bt_member", {"n": 100, "sleep": 2.0}, queue="bt", dsn=dsn)
        wait_until(lambda: set(states(dsn, [*long_ids, dependency]).values()) == {"running"},
                   timeout=30, what="every first job running")
        dependent = enqueue("bt_member", {"n": 200}, queue="bt", depends_on=[dependency],
                            conn=producer)
        opened = time.monotonic()

        # The dependency's completion is written while the transaction stays open.
        wait_until(lambda: states(dsn, [dependency])[dependency] == "completed",
                   timeout=15, what="the dependency's completion, the producer still open")
        # The long jobs finish once each (their leases renewed all along), and new work
        # enqueued meanwhile runs on both supervisors.
        wait_until(lambda: set(states(dsn, long_ids).values()) == {"completed"}, timeout=40,
                   what="the long jobs' completions")
        later = enqueue_many("bt_member", [{"n": 300 + i, "sleep": 0.3} for i in range(24)],
                             queue="bt", dsn=dsn)
        wait_until(lambda: set(states(dsn, later).values()) == {"completed"}, timeout=40,
                   what="jobs enqueued during the open transaction")
        assert time.monotonic() - opened < HOLD, "the checks took the whole hold"
        pids = {sup.pid: set(sup.children()) for sup in sups}
        ran_later = {r["pid"] for r in read_log(log) if r["id"] in later}
        assert all(ran_later & children for children in pids.values()), (ran_later, pids)

        # The dependent is still held: its dependency completed, but it does not exist
        # for anyone until the commit.
        time.sleep(max(0.0, HOLD - (time.monotonic() - opened)))
        producer.commit()
        wait_until(lambda: states(dsn, [dependent]).get(dependent) == "completed",
                   timeout=30, what="the dependent, after the commit")
    finally:
        producer.close()
        for sup in sups:
            sup.stop()

    runs = [r for r in read_log(log) if r["event"] == "run"]
    per_job: dict[int, int] = {}
    for r in runs:
        per_job[r["id"]] = per_job.get(r["id"], 0) + 1
    twice = {job_id: n for job_id, n in per_job.items() if n > 1}
    assert not twice, f"jobs that ran more than once: {twice}"
    first_dependent_run = min(r["t"] for r in runs if r["id"] == dependent)
    last_dependency_run = max(r["t"] for r in runs if r["id"] == dependency)
    assert first_dependent_run > last_dependency_run + 2.0  # after it ran its 2 s
