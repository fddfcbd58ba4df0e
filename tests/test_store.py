"""The store against real PostgreSQL: claims, fencing, retries, rescue, plans."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from shared.enqueue import enqueue, enqueue_many
from shared.jobs import FAIL_DISCARD, FAIL_ERROR, FAIL_SHUTDOWN, Backoff
from supervisor.db import Attempt, Completion, Failure, Renewal, Rescued, Store
from supervisor.db.claim import ClaimRequest, claim_sql, variant

pytestmark = pytest.mark.timeout(60)


def row(conn, job_id, columns="state, attempt"):
    return conn.execute(f"SELECT {columns} FROM supervisor.jobs WHERE id = %s",
                        (job_id,)).fetchone()


def expire_lease(conn, job_id):
    conn.execute("UPDATE supervisor.jobs SET lease_expires_at = now() - interval '1 second' "
                 "WHERE id = %s", (job_id,))


def make_due(conn, job_id):
    conn.execute("UPDATE supervisor.jobs SET run_at = now() - interval '1 second' "
                 "WHERE id = %s", (job_id,))


@pytest.mark.slow
def test_20k_jobs_claimed_exactly_once_by_four_connections(dsn, conn):
    enqueue_many("noop", [{"i": i} for i in range(20_000)], conn=conn)
    claimed: list[list[int]] = [[] for _ in range(4)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def worker(n: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as own:
                store = Store(own, owner=f"w{n}")
                barrier.wait()
                while batch := store.claim("default", ["noop"], 128):
                    claimed[n].extend(job.id for job in batch)
                    fenced = store.complete([Completion(j.id, j.attempt, None) for j in batch])
                    assert fenced == []
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    everything = [i for ids in claimed for i in ids]
    assert len(everything) == 20_000
    assert len(set(everything)) == 20_000
    assert all(claimed), "every connection should have won some jobs"
    counts = conn.execute("SELECT state, count(*), max(attempt) FROM supervisor.jobs "
                          "GROUP BY state").fetchall()
    assert counts == [("completed", 20_000, 1)]


def test_claim_sets_the_lease_and_returns_args_as_text(conn):
    job_id = enqueue("resize", {"path": "a.png"}, timeout=9.5, priority=3, conn=conn)
    [job] = Store(conn, "me", lease_ttl=60).claim("default", ["resize"], 10)
    assert (job.id, job.kind, job.attempt, job.priority, job.timeout) == (job_id, "resize", 1, 3,
                                                                        9.5)
    assert job.args_json == '{"path": "a.png"}'
    state, owner, ttl = row(conn, job_id, "state, lease_owner, "
                            "extract(epoch FROM lease_expires_at - now())")
    assert (state, owner) == ("running", "me")
    assert 55 < ttl <= 60


def test_claim_orders_by_priority_then_run_at_and_skips_future_jobs(conn):
    now = datetime.now(UTC)
    late = enqueue("k", run_at=now - timedelta(seconds=10), conn=conn)
    early = enqueue("k", run_at=now - timedelta(seconds=20), conn=conn)
    urgent = enqueue("k", priority=-5, conn=conn)
    conn.execute("INSERT INTO supervisor.jobs (kind, run_at) VALUES ('k', now() + '1 hour')")
    store = Store(conn, "me")
    assert [j.id for j in store.claim("default", ["k"], 1)] == [urgent]
    assert [j.id for j in store.claim("default", ["k"], 10)] == [early, late]
    assert store.claim("default", ["k"], 10) == []


def test_claim_skips_paused_queues_other_queues_and_other_kinds(conn):
    mine = enqueue("a", queue="q1", conn=conn)
    enqueue("b", queue="q1", conn=conn)
    enqueue("a", queue="q2", conn=conn)
    store = Store(conn, "me")
    conn.execute("INSERT INTO supervisor.queues (name, paused) VALUES ('q1', true)")
    assert store.claim("q1", ["a"], 10) == []
    assert not store.has_due_work(["q1"], ["a"])
    conn.execute("UPDATE supervisor.queues SET paused = false WHERE name = 'q1'")
    assert store.has_due_work(["q1"], ["a"])
    assert [j.id for j in store.claim("q1", ["a"], 10)] == [mine]
    assert store.claim("q1", ["a", "c"], 10) == []


def test_fenced_writes_after_the_lease_moved_on_change_nothing(conn):
    job_id = enqueue("k", conn=conn)
    old = Store(conn, "old")
    [first] = old.claim("default", ["k"], 1)
    old.started([Attempt(job_id, first.attempt)])
    expire_lease(conn, job_id)
    assert Store(conn, "maint").rescue_expired() == [Rescued(job_id, "old", False)]
    make_due(conn, job_id)
    new = Store(conn, "new")
    assert new.promote_due() == 1
    [second] = new.claim("default", ["k"], 1)
    assert second.attempt == first.attempt + 1
    before = row(conn, job_id, "state, attempt, lease_owner, errors, result, lease_expires_at")
    stale = Completion(job_id, first.attempt, '"late"')
    assert old.complete([stale]) == [job_id]
    assert old.fail([Failure(job_id, first.attempt, FAIL_ERROR, "x")]) == [job_id]
    assert old.release([Attempt(job_id, first.attempt)]) == [job_id]
    assert old.renew([Renewal(job_id, first.attempt)]) == [job_id]
    assert old.interrupt([Failure(job_id, first.attempt, FAIL_SHUTDOWN, "x")]) == [job_id]
    # The right attempt from the wrong owner is fenced as well.
    assert old.complete([Completion(job_id, second.attempt, None)]) == [job_id]
    assert row(conn, job_id, "state, attempt, lease_owner, errors, result, "
               "lease_expires_at") == before
    assert new.complete([Completion(job_id, second.attempt, '"ok"')]) == []
    assert row(conn, job_id, "state, result, lease_owner") == ("completed", "ok", None)


def test_backoff_grows_is_jittered_and_capped():
    backoff = Backoff(base=2.0, factor=3.0, cap=100.0, jitter=0.5)
    rng = random.Random(7)
    for attempt, raw in [(1, 2.0), (2, 6.0), (3, 18.0), (4, 54.0), (5, 100.0), (50, 100.0)]:
        samples = [backoff.delay(attempt, rng) for _ in range(200)]
        assert all(raw * 0.5 <= s <= raw for s in samples)
        assert max(samples) - min(samples) > raw * 0.3, "jitter should spread the delays"
    assert backoff.delay(10**6, rng) <= 100.0


def test_failure_stores_backoff_run_at_and_an_error_entry(conn):
    job_id = enqueue("k", conn=conn)
    store = Store(conn, "me", backoff=Backoff(base=100.0, factor=2.0, cap=1000.0, jitter=0.5))
    [job] = store.claim("default", ["k"], 1)
    assert store.fail([Failure(job_id, job.attempt, FAIL_ERROR, "boom", "Traceback...")]) == []
    state, wait, errors = row(conn, job_id, "state, extract(epoch FROM run_at - now()), errors")
    assert state == "retryable"
    assert 49 <= wait <= 100
    assert errors[0]["attempt"] == 1 and errors[0]["kind"] == FAIL_ERROR
    assert errors[0]["message"] == "boom" and errors[0]["traceback"] == "Traceback..."
    assert errors[0]["supervisor"] == "me" and errors[0]["at"]


def test_discarded_after_max_attempts_with_every_error_kept(conn):
    job_id = enqueue("k", max_attempts=3, conn=conn)
    store = Store(conn, "me")
    for attempt in (1, 2, 3):
        [job] = store.claim("default", ["k"], 1)
        assert job.attempt == attempt
        store.fail([Failure(job_id, attempt, FAIL_ERROR, f"fail {attempt}", retry_delay=0)])
        store.promote_due()
    state, finished, errors = row(conn, job_id, "state, finished_at IS NOT NULL, errors")
    assert (state, finished) == ("discarded", True)
    assert [(e["attempt"], e["message"]) for e in errors] == [
        (1, "fail 1"), (2, "fail 2"), (3, "fail 3")]
    assert store.claim("default", ["k"], 1) == []


def test_terminal_failure_discards_at_once(conn):
    job_id = enqueue("k", conn=conn)
    store = Store(conn, "me")
    [job] = store.claim("default", ["k"], 1)
    store.fail([Failure(job_id, job.attempt, FAIL_DISCARD, "bad input", terminal=True)])
    assert row(conn, job_id, "state, attempt") == ("discarded", 1)


def test_release_does_not_count_the_attempt(conn):
    job_id = enqueue("k", conn=conn)
    store = Store(conn, "me")
    [job] = store.claim("default", ["k"], 1)
    assert store.release([Attempt(job_id, job.attempt)]) == []
    assert row(conn, job_id, "state, attempt, lease_owner, errors") == ("available", 0, None, [])
    assert store.claim("default", ["k"], 1)[0].attempt == 1


def test_interrupt_returns_the_job_and_records_the_shutdown(conn):
    job_id = enqueue("k", conn=conn)
    store = Store(conn, "me")
    [job] = store.claim("default", ["k"], 1)
    store.interrupt([Failure(job_id, job.attempt, FAIL_SHUTDOWN, "grace ran out")])
    state, attempt, errors = row(conn, job_id, "state, attempt, errors")
    assert (state, attempt) == ("available", 0)
    assert errors[0]["kind"] == FAIL_SHUTDOWN


def test_renew_extends_the_lease_and_stores_progress(conn):
    job_id = enqueue("k", conn=conn)
    store = Store(conn, "me", lease_ttl=5)
    [job] = store.claim("default", ["k"], 1)
    store.lease_ttl = 500
    assert store.renew([Renewal(job_id, job.attempt, {"done": 2, "total": 3})]) == []
    ttl, progress = row(conn, job_id, "extract(epoch FROM lease_expires_at - now()), progress")
    assert ttl > 400 and progress == {"done": 2, "total": 3}
    store.renew([Renewal(job_id, job.attempt)])
    assert row(conn, job_id, "progress")[0] == {"done": 2, "total": 3}


def test_promote_due_moves_only_due_jobs(conn):
    due = enqueue("k", delay=3600, conn=conn)
    later = enqueue("k", delay=3600, conn=conn)
    make_due(conn, due)
    store = Store(conn, "me")
    assert store.queue_counts(["default"])["default"]["due"] == 1
    assert store.has_due_work(["default"], ["k"])
    assert store.promote_due() == 1
    assert row(conn, due, "state")[0] == "available"
    assert row(conn, later, "state")[0] == "scheduled"
    counts = store.queue_counts(["default", "empty"])
    assert counts["default"]["available"] == 1 and counts["default"]["scheduled"] == 1
    assert counts["empty"]["available"] == 0


def by_id(rescued: Rescued) -> int:
    return rescued.id


def test_rescue_expired_counts_the_attempt_and_discards_at_the_limit(conn):
    keep = enqueue("k", max_attempts=5, conn=conn)
    last = enqueue("k", max_attempts=1, conn=conn)
    fresh = enqueue("k", conn=conn)
    store = Store(conn, "lost")
    claimed = store.claim("default", ["k"], 3)
    store.started([Attempt(job.id, job.attempt) for job in claimed])
    expire_lease(conn, keep)
    expire_lease(conn, last)
    rescued = Store(conn, "maint").rescue_expired()
    assert sorted(rescued, key=by_id) == sorted(
        [Rescued(keep, "lost", False), Rescued(last, "lost", False)], key=by_id)
    assert row(conn, keep, "state, attempt")[0] == "retryable"
    assert row(conn, last, "state")[0] == "discarded"
    assert row(conn, fresh, "state")[0] == "running"
    entry = row(conn, keep, "errors")[0][0]
    assert entry["kind"] == "lease_expired" and "lost" in entry["message"]


def test_rescue_gives_back_a_job_that_never_started_without_spending_its_attempt(conn):
    never = enqueue("k", max_attempts=1, conn=conn)
    ran = enqueue("k", max_attempts=1, conn=conn)
    store = Store(conn, "lost")
    claimed = {job.id: job for job in store.claim("default", ["k"], 2)}
    store.started([Attempt(ran, claimed[ran].attempt)])
    for job_id in (never, ran):
        expire_lease(conn, job_id)
    rescued = Store(conn, "maint").rescue_expired()
    assert sorted(rescued, key=by_id) == sorted(
        [Rescued(never, "lost", True), Rescued(ran, "lost", False)], key=by_id)
    assert row(conn, never, "state, attempt, errors, lease_owner") == ("available", 0, [], None)
    assert row(conn, ran, "state, attempt")[0] == "discarded"


def test_a_start_carried_on_a_claim_never_overwrites_a_completion_in_it(conn):
    a, b, c = enqueue_many("k", [{}, {}, {}], conn=conn)
    store = Store(conn, "me")
    first = {job.id: job for job in store.claim("default", ["k"], 2)}
    # a finished before its start was written: both ride on one claim statement.
    result = store.run_claim(ClaimRequest(
        "default", ["k"], 1, completions=[Completion(a, first[a].attempt, '"done"')],
        starts=[Attempt(a, first[a].attempt), Attempt(b, first[b].attempt)]))
    assert result.fenced == [] and [j.id for j in result.jobs] == [c]
    assert row(conn, a, "state, result") == ("completed", "done")
    assert row(conn, b, "state")[0] == "running" and row(conn, b, "attempted_at")[0]


def test_claim_plan_uses_the_index_after_analyze(conn):
    enqueue_many("noop", [{"i": i} for i in range(20_000)], conn=conn)
    enqueue_many("other", [{}] * 500, queue="q2", conn=conn)
    conn.execute("ANALYZE supervisor.jobs")
    request = ClaimRequest("default", ["noop"], 512)
    params = Store(conn, "me")._claim_params(request)
    sql = claim_sql(variant(request, blocking=True))
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, params))
    assert "jobs_available_idx" in plan
    assert "Seq Scan on jobs" not in plan, plan


def test_claims_on_the_claim_connection_run_prepared_whatever_they_carry(dsn, conn):
    """Every non-blocking claim is a prepared statement, a large batch of completions
    too: the claim connection forces the generic plan (tests/test_claim_generic_plans.py),
    which measured cheaper than one planned for the batch at every size."""
    import selectors

    from supervisor.db.claim import CACHED_PLAN_BATCH
    from supervisor.db.nonblocking import NonBlockingQuery, Prepared

    ids = enqueue_many("k", [{}] * 60, conn=conn)
    with psycopg.connect(dsn, autocommit=True) as own:
        sel = selectors.DefaultSelector()
        store, runner = Store(own, "me"), NonBlockingQuery(own, sel)

        def answer():
            out = []
            yield out.append
            while not out:
                for key, mask in sel.select(5):
                    key.data.handle_event(key, mask)
            assert not isinstance(out[0], Exception), out[0]
            yield out[0]

        def claim(items, limit):
            waiting = answer()
            store.send_claim(runner, ClaimRequest("default", ["k"], limit, completions=items),
                             next(waiting))
            result = next(waiting)
            return result.fenced, result.jobs

        def done(jobs):
            return [Completion(j.id, j.attempt, '"ok"') for j in jobs]

        # Each form is prepared at its second use (its first goes out as it is).
        held = claim([], 20)[1] + claim([], 20)[1]  # the claim alone
        _, more = claim(done(held[:3]), 3)  # three completions ride on it
        more += claim(done(held[3:6]), 2)[1]
        large = done(held[6:6 + CACHED_PLAN_BATCH + 1])
        fenced, _ = claim(large, 5)
        assert fenced == [] and len(more) == 5
        waiting = answer()
        runner.send(Prepared("SELECT generic_plans + custom_plans FROM pg_prepared_statements"
                             " ORDER BY name"), {}, next(waiting))
        executions = next(waiting)
        sel.close()
    # The claim alone (its second use), and the carrying form for the small batches
    # and the large one alike.
    assert executions == [(1,), (2,)]
    states = dict(conn.execute("SELECT state, count(*) FROM supervisor.jobs WHERE id = ANY(%s) "
                               "GROUP BY state", (ids,)).fetchall())
    assert states == {"completed": 6 + len(large), "running": 50 - 6 - len(large),
                      "available": 10}


def test_a_claim_of_no_job_writes_its_completions_and_starts_and_takes_nothing(conn, dsn):
    """``Claimer.carry`` (issue 48): completions and starts go on the non-blocking claim
    connection in a claim whose limit is 0. It writes them, fenced as ever (a job whose
    lease moved on is reported, not written), and takes no job though jobs wait."""
    import selectors

    from supervisor.db.nonblocking import NonBlockingQuery

    enqueue_many("k", [{}] * 6, conn=conn)
    store = Store(conn, "me")
    held = store.claim("default", ["k"], 4)
    conn.execute("UPDATE supervisor.jobs SET lease_owner = 'other' WHERE id = %s",
                 (held[3].id,))
    with psycopg.connect(dsn, autocommit=True) as own:
        sel = selectors.DefaultSelector()
        out: list = []
        request = ClaimRequest("default", ["k"], 0,
                               completions=[Completion(j.id, j.attempt, '"ok"')
                                            for j in (held[0], held[1], held[3])],
                               starts=[Attempt(held[2].id, held[2].attempt)])
        Store(own, "me").send_claim(NonBlockingQuery(own, sel), request, out.append)
        while not out:
            for key, mask in sel.select(5):
                key.data.handle_event(key, mask)
        sel.close()
    assert not isinstance(out[0], Exception), out[0]
    assert out[0].jobs == [] and out[0].fenced == [held[3].id]
    rows = dict(conn.execute("SELECT id, state FROM supervisor.jobs").fetchall())
    assert [rows[j.id] for j in held] == ["completed", "completed", "running", "running"]
    assert sorted(state for job_id, state in rows.items()
                  if job_id not in {j.id for j in held}) == ["available", "available"]
    started = conn.execute("SELECT attempted_at IS NOT NULL FROM supervisor.jobs WHERE id = %s",
                           (held[2].id,)).fetchone()[0]
    assert started


@pytest.mark.parametrize("path", ["complete", "run_claim", "send_claim"])
def test_a_batch_in_any_order_writes_each_job_its_own_values(conn, dsn, path):
    """Each row of a completion batch reads its values at its place among the batch's
    ids (a binary search: ``sql._by_place``), so the store sends every batch sorted by id.
    Given in reverse and shuffled order, each job still gets its own result, usage,
    output and attempt's start; a result of JSON null stays JSON null and none stays
    SQL NULL; a start carried beside them writes its own job."""
    import selectors

    from shared.usage import Usage
    from supervisor.db.nonblocking import NonBlockingQuery

    enqueue_many("k", [{}] * 40, conn=conn)
    store = Store(conn, "me")
    held = store.claim("default", ["k"], 40)
    started = held.pop()
    random.Random(7).shuffle(held)
    held.sort(key=lambda j: -j.id % 3)  # neither sorted nor reversed

    def completion(j) -> Completion:
        result = None if j.id % 5 == 0 else "null" if j.id % 5 == 1 else f'{{"n": {j.id}}}'
        return Completion(j.id, j.attempt, result,
                          usage=Usage(j.id / 1000, j.id / 100, j.id * 1024),
                          output=f"printed {j.id}\n\"quoted\"" if j.id % 2 else None,
                          ran=float(j.id % 7))

    items = [completion(j) for j in held]
    starts = [Attempt(started.id, started.attempt)]
    if path == "complete":
        assert store.complete(items) == []
        store.started(starts)
    elif path == "run_claim":
        assert store.run_claim(ClaimRequest("default", ["k"], 0, completions=items,
                                            starts=starts)).fenced == []
    else:
        with psycopg.connect(dsn, autocommit=True) as own:
            sel = selectors.DefaultSelector()
            out: list = []
            Store(own, "me").send_claim(
                NonBlockingQuery(own, sel),
                ClaimRequest("default", ["k"], 0, completions=items, starts=starts),
                out.append)
            while not out:
                for key, mask in sel.select(5):
                    key.data.handle_event(key, mask)
            sel.close()
        assert not isinstance(out[0], Exception), out[0]
        assert out[0].fenced == []
    rows = {r[0]: r[1:] for r in conn.execute(
        "SELECT id, state, result IS NULL, result::text, usage, output, "
        "extract(epoch FROM finished_at - attempted_at) FROM supervisor.jobs").fetchall()}
    for j in held:
        state, no_result, result, usage, output, took = rows[j.id]
        assert state == "completed", j.id
        if j.id % 5 == 0:
            assert no_result, j.id
        elif j.id % 5 == 1:
            assert result == "null", j.id
        else:
            assert result == f'{{"n": {j.id}}}', j.id
        assert usage == {"cpu_seconds": j.id / 1000, "wall_seconds": j.id / 100,
                         "max_rss_bytes": j.id * 1024}, j.id
        assert output == (f"printed {j.id}\n\"quoted\"" if j.id % 2 else None), j.id
        # the start written from "ran" seconds before the completion (0 for none)
        assert took == pytest.approx(j.id % 7, abs=0.5), j.id
    assert rows[started.id][0] == "running"
    assert conn.execute("SELECT attempted_at IS NOT NULL FROM supervisor.jobs WHERE id = %s",
                        (started.id,)).fetchone()[0]
