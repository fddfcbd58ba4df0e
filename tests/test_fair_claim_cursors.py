"""A fair queue's claim cursors (issues 40 and 42 together): its group of jobs of no batch
starts at a key and its loose scan of the batches at a batch id (``FairStart``), kept by
``ClaimCursors`` from what each fair claim took and returned. The cursors only ever pass
what is known to be taken: a job of no batch that lost its turn is not passed, and a
member made available again behind the batch cursor is taken after the next poll.
Index entries read under a held snapshot are tests/test_fair_claim_horizon.py's."""

from __future__ import annotations

import psycopg

from shared.batches import Callback
from shared.enqueue import enqueue, enqueue_many
from shared.jobs import ClaimedJob
from supervisor.db import Attempt, ClaimKey, ClaimRequest, Store
from supervisor.engine.cursors import ClaimCursors, FairStart


def _job(job_id: int, run_at: float, batch_id: int | None,
         first_batch: int | None = None) -> ClaimedJob:
    return ClaimedJob(id=job_id, kind="k", queue="f", attempt=1, max_attempts=3, priority=0,
                      timeout=None, args_json="{}", run_at=run_at, batch_id=batch_id,
                      first_batch=first_batch)


# -- the bookkeeping (no database) --------------------------------------------------------

def test_a_full_claim_passes_only_the_jobs_of_no_batch_it_took():
    cursors = ClaimCursors()
    assert cursors.fair_start("f") == FairStart(None, None)
    cursors.fair_claimed("f", [_job(1, 10.0, 7, 7), _job(2, 20.0, 8, 7)], limit=2)
    # Members only: a job of no batch may have lost its turn anywhere past the head.
    assert cursors.fair_start("f") == FairStart(None, 7)
    cursors.fair_claimed("f", [_job(3, 5.0, None, 7), _job(4, 30.0, 8, 7)], limit=2)
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 5.0, 3), 7)


def test_a_short_claim_passes_every_job_it_took_and_never_moves_back():
    cursors = ClaimCursors()
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(1, 10.0, None, 8), _job(2, 40.0, 8, 8)], limit=5)
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 40.0, 2), 8)
    # A member behind the key, of a batch the claim turned to: not a step back.
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(3, 15.0, 9, 9)], limit=5)
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 40.0, 2), 9)
    cursors.fair_start("f")
    cursors.fair_claimed("f", [], limit=5)  # nothing taken: nothing learnt
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 40.0, 2), 9)


def test_each_poll_sends_the_batch_scan_back_to_the_lowest_batch():
    cursors = ClaimCursors()
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(1, 10.0, None, 4)], limit=5)
    assert cursors.poll_starts(0.0, listening=True) == {}  # fair queues: from the head
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 10.0, 1), None)
    # A claim out across a poll learns nothing: what it passed may be waiting again.
    cursors.fair_start("f")
    cursors.poll_starts(1.0, listening=True)
    cursors.fair_claimed("f", [_job(2, 20.0, None, 6)], limit=5)
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 10.0, 1), None)


def test_a_job_told_behind_the_key_moves_it_back_and_the_batch_scan_too():
    cursors = ClaimCursors()
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(1, 10.0, None, 4)], limit=5)
    cursors.observed({"f": ClaimKey(0, 50.0)})  # ahead: nothing to do
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 10.0, 1), 4)
    cursors.observed({"f": ClaimKey(0, 3.0)})
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 3.0), None)
    cursors.forget()
    assert cursors.fair_start("f") == FairStart(None, None)


# -- with the statement --------------------------------------------------------------------

def _batch(conn: psycopg.Connection, n: int) -> list[int]:
    return enqueue_many("k", [{}] * n, then=Callback("cb", {}), queue="f", conn=conn).ids


def _claim(store: Store, cursors: ClaimCursors, limit: int) -> list[ClaimedJob]:
    start = cursors.fair_start("f")
    jobs = store.run_claim(ClaimRequest("f", ["k"], limit, start=start.loose, fair=True,
                                        first_batch=start.first_batch)).jobs
    cursors.fair_claimed("f", jobs, limit)
    return jobs


def test_a_fair_claim_returns_each_jobs_batch_and_the_first_waiting_batch(conn):
    first = _batch(conn, 2)
    second = _batch(conn, 2)
    loose = enqueue("k", queue="f", conn=conn)
    batch_of = dict(conn.execute("SELECT id, batch_id FROM supervisor.jobs WHERE id = ANY(%s)",
                                 (first + second,)).fetchall())
    jobs = Store(conn, "me").run_claim(ClaimRequest("f", ["k"], 10, fair=True)).jobs
    assert {job.id: job.batch_id for job in jobs} == batch_of | {loose: None}
    assert {job.first_batch for job in jobs} == {batch_of[first[0]]}


def test_cursors_kept_from_claim_to_claim_take_every_job_once(conn):
    """A job of no batch behind a batch's members loses the first claim's turns to two
    batches; a cursor that passed every job taken would pass it too, and it would wait
    for a poll (here: forever)."""
    members = _batch(conn, 3) + _batch(conn, 3)
    loose = enqueue("k", queue="f", conn=conn)
    members += _batch(conn, 3)
    store, cursors = Store(conn, "me"), ClaimCursors()
    taken: list[int] = []
    while jobs := _claim(store, cursors, 2):
        taken += [job.id for job in jobs]
    assert sorted(taken) == sorted([*members, loose])


def test_a_member_made_available_behind_the_batch_cursor_is_taken_after_a_poll(conn):
    early = _batch(conn, 2)
    _batch(conn, 2)
    store, cursors = Store(conn, "me"), ClaimCursors()
    taken = _claim(store, cursors, 10)
    assert len(taken) == 4
    later = _batch(conn, 2)
    # The batch cursor is the lowest batch with waiting members as a claim began: the
    # early batch's still, then the later's.
    assert {job.id for job in _claim(store, cursors, 10)} == set(later)
    store.release([Attempt(job.id, job.attempt) for job in taken if job.id == early[0]])
    newest = _batch(conn, 2)
    # From a batch cursor past the early batch: its member made available is not seen.
    assert {job.id for job in _claim(store, cursors, 10)} == set(newest)
    cursors.poll_starts(0.0, listening=True)
    assert [job.id for job in _claim(store, cursors, 10)] == [early[0]]
