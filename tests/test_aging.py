"""Priority aging in the claim, against real PostgreSQL: the order it gives, that it
matches the rule job for job, its plan, that a queue without aging keeps the plain
claim, and, with a real supervisor, that a steady stream of urgent jobs no longer
starves an old one."""

from __future__ import annotations

import math
import random
import signal

import psycopg
import pytest
from e2e import Supervisor, read_log, wait_until

from shared.enqueue import enqueue, enqueue_many
from supervisor.db.claim import (
    ClaimRequest,
    ClaimVariant,
    Shape,
    claim_sql,
    variant,
)
from supervisor.db.store import Attempt, Completion, Store

CLAIM = claim_sql(ClaimVariant(aged=False, keyed=False, shape=Shape.BARE))
CLAIM_AGED = claim_sql(ClaimVariant(aged=True, keyed=False, shape=Shape.BARE))

pytestmark = pytest.mark.timeout(120)


def set_age(conn, job_id, seconds):
    conn.execute("UPDATE supervisor.jobs SET run_at = now() - %s * interval '1 second' "
                 "WHERE id = %s", (seconds, job_id))


def test_an_old_job_gains_one_step_per_interval(conn):
    fresh = enqueue("k", priority=0, conn=conn)
    old = enqueue("k", priority=5, conn=conn)
    set_age(conn, old, 330)  # 5 - floor(330 / 60) = 0: ties with fresh, and is older
    store = Store(conn, "me")
    assert [j.id for j in store.claim("default", ["k"], 1, aging=60)] == [old]
    assert [j.id for j in store.claim("default", ["k"], 1, aging=60)] == [fresh]


def test_not_old_enough_or_aging_off_keeps_the_stored_priority(conn):
    fresh = enqueue("k", priority=0, conn=conn)
    old = enqueue("k", priority=5, conn=conn)
    set_age(conn, old, 250)  # 5 - floor(250 / 60) = 1: still behind priority 0
    store = Store(conn, "me")
    assert [j.id for j in store.claim("default", ["k"], 1, aging=60)] == [fresh]
    store.release([Attempt(fresh, 1)])
    set_age(conn, old, 100_000)
    assert [j.id for j in store.claim("default", ["k"], 1, aging=0)] == [fresh]
    assert [j.id for j in store.claim("default", ["k"], 1, aging=0)] == [old]


def test_complete_and_claim_ages_too(conn):
    first = enqueue("k", conn=conn)
    store = Store(conn, "me")
    [job] = store.claim("default", ["k"], 1, aging=60)
    fresh = enqueue("k", priority=0, conn=conn)
    old = enqueue("k", priority=3, conn=conn)
    set_age(conn, old, 200)  # 3 - floor(200 / 60) = 0, and older than fresh
    result = store.run_claim(ClaimRequest("default", ["k"], 1, aging=60,
                                          completions=[Completion(first, job.attempt, None)]))
    assert result.fenced == [] and [j.id for j in result.jobs] == [old]
    assert conn.execute("SELECT state FROM supervisor.jobs WHERE id = %s",
                        (first,)).fetchone()[0] == "completed"
    assert conn.execute("SELECT state FROM supervisor.jobs WHERE id = %s",
                        (fresh,)).fetchone()[0] == "available"


def test_aged_claim_respects_kinds_pause_and_due_time(conn):
    other_kind = enqueue("other", priority=9, conn=conn)
    later = enqueue("k", priority=9, delay=3600, conn=conn)
    set_age(conn, other_kind, 10_000)
    store = Store(conn, "me")
    assert store.claim("default", ["k"], 10, aging=1) == []  # later is not due
    mine = enqueue("k", priority=9, conn=conn)
    set_age(conn, mine, 10_000)
    conn.execute("INSERT INTO supervisor.queues (name, paused) VALUES ('default', true)")
    assert store.claim("default", ["k"], 10, aging=1) == []
    conn.execute("UPDATE supervisor.queues SET paused = false")
    assert [j.id for j in store.claim("default", ["k"], 10, aging=1)] == [mine]
    assert later not in {j.id for j in store.claim("default", ["k", "other"], 10, aging=1)}


@pytest.mark.parametrize("per_key", [None, 400])
@pytest.mark.parametrize("limit", [1, 7, 64])
def test_aged_claim_order_matches_the_rule_job_for_job(conn, limit, per_key):
    """400 jobs over 6 priority levels and many ages: every claim returns exactly the
    next ``limit`` jobs by (priority - floor(waited / aging), run_at, id); the same
    through the keyed claim (a per-key limit no key reaches, one key per job)."""
    rnd = random.Random(limit)
    aging = 600.0  # half-steps of 300 s: a slow run cannot move a job across a step
    ids = enqueue_many("k", [{}] * 400, conn=conn)
    jobs = {}
    for job_id in ids:
        priority = rnd.randrange(6)
        # Ages half-way between steps, so the second or two the test takes cannot
        # move a job across a step boundary.
        age = (rnd.randrange(8) + 0.5) * aging
        conn.execute("UPDATE supervisor.jobs SET priority = %s, concurrency_key = %s, "
                     "run_at = now() - %s * interval '1 second' WHERE id = %s",
                     (priority, None if per_key is None else str(job_id), age, job_id))
        jobs[job_id] = (priority - math.floor(age / aging), -age, job_id)
    expected = sorted(jobs, key=jobs.get)
    store = Store(conn, "me")
    got = []
    while batch := store.claim("default", ["k"], limit, aging=aging, per_key=per_key):
        assert [j.id for j in batch] == sorted((j.id for j in batch), key=jobs.get)
        got.append([j.id for j in batch])
    flat = [job_id for batch in got for job_id in batch]
    assert flat == expected


def plan(conn, sql, aging=0.0):
    from supervisor.db import Store

    params = Store(conn, "me")._claim_params(ClaimRequest("default", ["noop"], 512, aging))
    return "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, params))


def test_aged_claim_plan_uses_the_indexes_after_analyze(conn):
    """The plan on a 20k-row analyzed table: the loose scan over priority levels and the
    ordered head come from the partial claim index, the final lock from the primary
    key; nothing scans the table."""
    enqueue_many("noop", [{"i": i} for i in range(20_000)], conn=conn)
    enqueue_many("other", [{}] * 500, queue="q2", conn=conn)
    conn.execute("UPDATE supervisor.jobs SET priority = id % 5")
    conn.execute("ANALYZE supervisor.jobs")
    aged = plan(conn, CLAIM_AGED, aging=60.0)
    assert "Seq Scan" not in aged, aged
    assert "Recursive Union" in aged, aged
    assert "Index Only Scan using jobs_available_idx" in aged, aged
    assert "Index Scan using jobs_pkey" in aged, aged
    plain = plan(conn, CLAIM)  # a queue without aging: the statement as it always was
    assert "jobs_available_idx" in plain and "Seq Scan" not in plain, plain
    assert "Recursive Union" not in plain


def test_aging_off_runs_the_plain_claim():
    for blocking in (True, False):
        for writes in ((), [Completion(1, 1, None)]):
            plain = variant(ClaimRequest("q", ["k"], 5, 0.0, completions=writes), blocking)
            aged = variant(ClaimRequest("q", ["k"], 5, 0.5, completions=writes), blocking)
            assert not plain.aged and aged.aged and plain.shape is aged.shape
            assert "aging" not in claim_sql(plain) and "aging" in claim_sql(aged)


# -- a real supervisor --------------------------------------------------------------

# Priority-0 jobs kept waiting. Deeper than the children's pipes can take (with 6, both
# pipes held them all at the start, the queue ran empty and the lone job was claimed at
# once).
URGENT_BACKLOG = 12
JOB = 0.1
AGING = 0.5
# Five steps from priority 5 to 0 take 5 * AGING; the urgent jobs age too while they wait
# (the backlog shared by two children), so the lone job needs that many steps more, and
# one; then one claim and one job length.
BOUND = 5 * AGING + URGENT_BACKLOG * JOB / 2 + AGING + 1.0


def starve_test(dsn, tmp_path, aging, watch_for):
    """Run -n 2 under a steady stream of priority-0 jobs, with one priority-5 job
    enqueued at the start; returns (seconds until it started or None, urgent starts)."""
    log = tmp_path / "runs.log"
    config = tmp_path / "supervisor.toml"
    config.write_text(f"[queues.default]\naging = {aging}\n")
    enqueue_many("e2e_sleep", [{"seconds": JOB}] * URGENT_BACKLOG, dsn=dsn)
    sup = Supervisor(dsn, "-n", "2", "--config", str(config), log_path=log)
    conn = psycopg.connect(dsn, autocommit=True)
    try:
        wait_until(lambda: read_log(log), what="the first start")
        lone = enqueue("e2e_sleep", {"seconds": JOB}, priority=5, conn=conn)
        enqueued = conn.execute("SELECT extract(epoch FROM run_at) FROM supervisor.jobs "
                                "WHERE id = %s", (lone,)).fetchone()[0]

        def top_up_then_check():
            waiting = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state = "
                                   "'available' AND priority = 0").fetchone()[0]
            if waiting < URGENT_BACKLOG:
                enqueue_many("e2e_sleep", [{"seconds": JOB}] * (URGENT_BACKLOG - waiting),
                             conn=conn)
            started = [r for r in read_log(log) if r["id"] == lone and r["event"] == "start"]
            return started[0]["t"] if started else None

        try:
            started_at = wait_until(top_up_then_check, timeout=watch_for,
                                    interval=0.02, what="the priority-5 job")
        except AssertionError:
            started_at = None
        urgent = [r for r in read_log(log) if r["event"] == "start" and r["id"] != lone
                  and r["t"] >= float(enqueued)]
        sup.signal(signal.SIGTERM)
        assert sup.wait(30) == 0, sup.err
    finally:
        sup.stop()
        conn.close()
    waited = None if started_at is None else started_at - float(enqueued)
    return waited, urgent


@pytest.mark.slow
def test_with_aging_a_low_priority_job_starts_within_its_bound(dsn, tmp_path):
    waited, urgent = starve_test(dsn, tmp_path, AGING, watch_for=BOUND + 5)
    assert waited is not None and waited <= BOUND, waited
    assert waited >= 4 * AGING  # it did wait its turn: aging, not a free child
    # The stream kept both children busy the whole time.
    assert len(urgent) >= 0.7 * 2 * waited / JOB, len(urgent)


@pytest.mark.slow
def test_without_aging_the_stream_starves_it(dsn, tmp_path):
    waited, urgent = starve_test(dsn, tmp_path, 0, watch_for=BOUND + 1)
    assert waited is None
    assert len(urgent) >= 0.7 * 2 * (BOUND + 1) / JOB, len(urgent)


def test_a_queue_with_a_per_key_limit_ages_its_jobs_too(conn):
    # Before the claim builder, the keyed claim ignored aging: the fresh job came first.
    fresh = enqueue("k", priority=0, queue="kq", concurrency_key="a", conn=conn)
    old = enqueue("k", priority=5, queue="kq", concurrency_key="b", conn=conn)
    set_age(conn, old, 330)  # 5 - floor(330 / 60) = 0: ties with fresh, and is older
    store = Store(conn, "me")
    assert [j.id for j in store.claim("kq", ["k"], 1, aging=60, per_key=1)] == [old]
    assert [j.id for j in store.claim("kq", ["k"], 1, aging=60, per_key=1)] == [fresh]


def test_aging_keeps_the_per_key_limit(conn):
    fresh = enqueue("k", priority=0, queue="kq", concurrency_key="a", conn=conn)
    older, old = (enqueue("k", priority=5, queue="kq", concurrency_key="b", conn=conn)
                  for _ in range(2))
    set_age(conn, older, 400)
    set_age(conn, old, 330)
    unkeyed = enqueue("k", priority=9, queue="kq", conn=conn)
    set_age(conn, unkeyed, 600)  # 9 - 10 = -1: first of all, and never limited
    store = Store(conn, "me")
    claimed = store.claim("kq", ["k"], 10, aging=60, per_key=1)
    assert [j.id for j in claimed] == [unkeyed, older, fresh]  # old waits for its key
    store.complete([Completion(j.id, j.attempt, None) for j in claimed if j.id == older])
    assert [j.id for j in store.claim("kq", ["k"], 10, aging=60, per_key=1)] == [old]


def test_the_non_blocking_claim_of_a_keyed_aged_queue_carries_its_writes(dsn, conn):
    """The engine's path (send_claim): a queue with aging and a per-key limit, claims
    alone and carrying completions and starts, prepared or not; each answer is a
    ClaimResult in aged order."""
    import selectors

    from supervisor.db import ClaimRequest, NonBlockingQuery

    keyed = [enqueue("k", priority=5, queue="kq", concurrency_key=key, conn=conn)
             for key in ("a", "a", "b")]
    for n, job_id in enumerate(keyed):
        set_age(conn, job_id, 400 - n)  # 5 - 6 = -1: ahead of the fresh priority-0 jobs
    fresh = enqueue_many("k", [{}] * 60, queue="kq", priority=0, conn=conn)
    with psycopg.connect(dsn, autocommit=True) as own:
        sel = selectors.DefaultSelector()
        store, runner = Store(own, "me"), NonBlockingQuery(own, sel)

        def claim(limit, completions=(), starts=()):
            out = []
            store.send_claim(runner, ClaimRequest("kq", ["k"], limit, aging=60, per_key=1,
                                                  completions=completions, starts=starts),
                             out.append)
            while not out:
                for key, mask in sel.select(5):
                    key.data.handle_event(key, mask)
            assert not isinstance(out[0], Exception), out[0]
            return out[0]

        first = claim(4)  # alone: the older "a" and "b", then fresh jobs
        assert [j.id for j in first.jobs] == [keyed[0], keyed[2], *fresh[:2]]
        done = [Completion(j.id, j.attempt, None) for j in first.jobs[:2]]
        second = claim(2, done, [Attempt(j.id, j.attempt) for j in first.jobs[2:]])
        # "a" was completed by this very statement, which its per-key count cannot see
        # (as for a keyed claim without aging): the key's next job waits for the next.
        assert second.fenced == [] and [j.id for j in second.jobs] == fresh[2:4]
        held = first.jobs[2:] + second.jobs
        many = [Completion(j.id, j.attempt, None) for j in held]
        stale = [c.id for c in done] + fresh[40:]  # completed already, or never claimed
        many += [Completion(job_id, 1, None) for job_id in stale]
        third = claim(20, many)  # a large batch: planned for its size
        sel.close()
    assert [j.id for j in third.jobs] == [keyed[1], *fresh[4:23]]
    assert sorted(third.fenced) == sorted(stale)
    assert conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state = 'completed'"
                        ).fetchone()[0] == 2 + len(held)
    started = conn.execute("SELECT id FROM supervisor.jobs WHERE attempted_at IS NOT NULL"
                           ).fetchall()
    # The carried starts, and every completed job (a completion also sets attempted_at
    # when the job's start was never written).
    completed = {r[0] for r in conn.execute(
        "SELECT id FROM supervisor.jobs WHERE state = 'completed'")}
    assert sorted(r[0] for r in started) == sorted(set(fresh[:2]) | completed)


@pytest.mark.parametrize("per_key", [None, 1])
def test_the_largest_aging_the_config_allows_still_claims(conn, per_key):
    """config.py refuses aging past MAX_AGING because the claim cannot compute it: at
    the bound a claim works; far past it PostgreSQL refuses the arithmetic."""
    from supervisor.queue_policy import MAX_AGING

    job = enqueue("k", queue="kq", concurrency_key="a", conn=conn)
    store = Store(conn, "me")
    with pytest.raises(psycopg.errors.DataError):  # interval or timestamp out of range
        store.claim("kq", ["k"], 1, aging=1e12, per_key=per_key)
    assert [j.id for j in store.claim("kq", ["k"], 1, aging=MAX_AGING, per_key=per_key)] == [job]
