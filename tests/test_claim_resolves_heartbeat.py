"""A claimed job's heartbeat timeout is resolved once, at claim, beside its hard
timeout (issue 41): its handler's ``@job(heartbeat_timeout=...)``, else None (the
pool's). The pool reads it from the job and never looks up a handler itself."""

from __future__ import annotations

import pool_handlers  # noqa: F401  (registers pool_short_beat: @job(heartbeat_timeout=0.5))
from engine_fakes import make_engine

from shared.jobs import ClaimedJob
from supervisor.engine.policy import resolve_heartbeat_timeout


def claimed(kind: str) -> ClaimedJob:
    return ClaimedJob(1, kind, "default", 1, 5, 0, None, "{}")


def test_the_handler_sets_it_else_the_pool_does():
    assert resolve_heartbeat_timeout(claimed("pool_short_beat")) == 0.5
    assert resolve_heartbeat_timeout(claimed("pool_noop")) is None
    assert resolve_heartbeat_timeout(claimed("no_such_kind")) is None


def test_the_claim_resolves_it_beside_the_timeout():
    engine, db, store, pool, clock = make_engine(children=2)
    store.add(n=1, kind="pool_short_beat")
    store.add(n=1, kind="pool_noop")
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    beats = {job.kind: job.heartbeat_timeout for job in pool.jobs.values()}
    assert beats == {"pool_short_beat": 0.5, "pool_noop": None}
    assert all(job.timeout is not None for job in pool.jobs.values())  # the config's
