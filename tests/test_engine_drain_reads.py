"""``engine.draining.Drain`` and ``engine.reads.RunReads`` over fakes: a drain stops
claiming and gives back what has not started, tells the running jobs that cannot end
within the grace (the table's run time for a kind not measured here yet), and the
arbiter's reads answer None while the database is away."""

from __future__ import annotations

from engine_fakes import make_engine

import supervisor.engine.draining as draining
from shared.jobs import ClaimedJob


def job(job_id: int) -> ClaimedJob:
    return ClaimedJob(job_id, "k", "default", 1, 5, 0, None, "{}")


def test_a_drain_claims_nothing_more_and_writes_back_what_had_not_started():
    engine, _db, store, pool, clock = make_engine()
    engine.ledger.add_claimed([job(1), job(2)])
    assert engine.draining.begin(clock.now) == 2
    assert not engine.claimer.accepting and engine.reporter.releasing
    assert ("release", [1, 2]) in store.calls
    engine.claimer.claim(clock.now, pool.size())
    assert engine.claimer.in_flight is None


def test_running_jobs_are_told_by_the_tables_run_time_until_this_supervisor_has_its_own(
        monkeypatch):
    engine, _db, store, pool, _clock = make_engine()
    pool.dispatch(job(1))
    asked: list[tuple[list[str], int]] = []

    def p95(connection, kinds, fewest):
        asked.append((kinds, fewest))
        return {"k": 0.5}  # ends within the grace: left to finish

    monkeypatch.setattr(draining, "kind_run_p95", p95)
    store.connection = None  # the fake's store has no psycopg connection to read with
    assert engine.draining.notify(pool, grace=1.0) == 0
    assert asked == [(["k"], engine.config.tuning.drain_min_samples)]
    assert not pool.notified
    engine.draining.tick(engine.draining.ends - 0.1, pool)  # 0.1 s of grace left
    assert pool.notified == [(1, "drain")]


def test_the_arbiters_reads_answer_none_while_the_database_is_away():
    engine, db, _store, _pool, _clock = make_engine()
    assert engine.reads.queue_counts() == {}
    db.break_connection()
    assert engine.reads.queue_counts() is None
    assert engine.queue_counts() is None
