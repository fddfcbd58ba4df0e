"""A fair queue's claim cursors (issues 40 and 42 together): its group of jobs of no batch
starts at a key, its walk of the batches at a batch id, and each batch it claimed from
past the last member taken (``FairStart``), kept by ``ClaimCursors`` from what each fair
claim took and returned. The cursors only ever pass what is known to be taken: a job of
no batch that lost its turn is not passed, and a member made available again behind a
batch cursor is taken once its notice is told (or after the next poll from the head).
Index entries read under a held snapshot are tests/test_fair_claim_horizon.py's."""

from __future__ import annotations

import selectors

import psycopg

from shared.batches import Callback
from shared.enqueue import enqueue, enqueue_many
from shared.jobs import ClaimedJob, ClaimPosition
from supervisor.db import Attempt, ClaimKey, ClaimRequest, Store
from supervisor.db.database import Database
from supervisor.engine.cursors import ClaimCursors, FairStart


def _job(job_id: int, run_at: float, batch_id: int | None, first_batch: int | None = None,
         loose: tuple[float, int] | None = None) -> ClaimedJob:
    """A job a fair claim took; ``loose``: the (run_at, id) the claim said its group of
    jobs of no batch starts after next."""
    return ClaimedJob(id=job_id, kind="k", queue="f", attempt=1, max_attempts=3, priority=0,
                      timeout=None, args_json="{}", run_at=run_at, batch_id=batch_id,
                      first_batch=first_batch,
                      loose_next=None if loose is None else ClaimPosition(0, *loose))


# -- the bookkeeping (no database) --------------------------------------------------------

def test_the_groups_key_moves_where_the_claim_says_and_each_batch_past_its_members():
    cursors = ClaimCursors()
    assert cursors.fair_start("f") == FairStart(None, None)
    # Its look at the head was taken up to job 1 (job 2 of batch 8 lost its turn there).
    cursors.fair_claimed("f", [_job(1, 10.0, 7, 7, (10.0, 1)), _job(5, 20.0, 8, 7, (10.0, 1))],
                         limit=2)
    # Each batch's members were taken from its front: it is read past them.
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 10.0, 1), 7, {
        7: ClaimKey(0, 10.0, 1), 8: ClaimKey(0, 20.0, 5)})
    cursors.fair_claimed("f", [_job(3, 5.0, None, 7, (30.0, 4)), _job(4, 30.0, 8, 7, (30.0, 4))],
                         limit=2)
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 30.0, 4), 7, {
        7: ClaimKey(0, 10.0, 1), 8: ClaimKey(0, 30.0, 4)})


def test_the_cursors_never_move_back_on_a_claims_word():
    cursors = ClaimCursors()
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(1, 10.0, None, 8, (40.0, 2)), _job(2, 40.0, 8, 8, (40.0, 2))],
                         limit=5)
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 40.0, 2), 8,
                                                {8: ClaimKey(0, 40.0, 2)})
    # A member behind the key, of a batch the claim turned to: not a step back.
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(3, 15.0, 9, 9, (15.0, 3))], limit=5)
    # The walk starts at batch 9 now: batch 8's cursor is dropped with it.
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 40.0, 2), 9,
                                                {9: ClaimKey(0, 15.0, 3)})
    cursors.fair_start("f")
    cursors.fair_claimed("f", [], limit=5)  # nothing taken: nothing learnt
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 40.0, 2), 9,
                                                {9: ClaimKey(0, 15.0, 3)})
    # Nothing was due past the group's key: it stays.
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(4, 16.0, 9, 9)], limit=5)
    assert cursors.fair_start("f").loose == ClaimKey(0, 40.0, 2)


def test_only_the_poll_from_the_head_sends_the_walk_back_to_the_lowest_batch():
    cursors = ClaimCursors()
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(1, 10.0, None, 4, (12.0, 2)), _job(2, 12.0, 4, 4, (12.0, 2))],
                         limit=5)
    assert cursors.poll_starts(0.0, listening=True) == {}  # the first poll: from the head
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 12.0, 2), None)
    # A claim out across a poll from the head learns nothing: what it passed may be
    # waiting again.
    cursors.poll_starts(100.0, listening=True)
    cursors.fair_claimed("f", [_job(3, 20.0, None, 6, (21.0, 4)), _job(4, 21.0, 6, 6, (21.0, 4))],
                         limit=5)
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 12.0, 2), None)
    # Other polls leave the walk and the batch cursors, and read the queue past its key
    # once its last claim came back short.
    cursors.fair_claimed("f", [_job(3, 20.0, None, 6, (21.0, 4)), _job(4, 21.0, 6, 6, (21.0, 4))],
                         limit=5)
    assert cursors.poll_starts(101.0, listening=True) == {"f": ClaimKey(0, 21.0, 4)}
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 21.0, 4), 6,
                                                {6: ClaimKey(0, 21.0, 4)})
    # A full claim: members may wait behind the key, so the poll reads from the head.
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(5, 22.0, 6, 6), _job(6, 23.0, 7, 6)], limit=2)
    assert cursors.poll_starts(102.0, listening=True) == {}
    # An empty claim: nothing due past the cursors, so an idle queue's polls read past
    # its key, not through every entry a hold kept from the head.
    cursors.fair_start("f")
    cursors.fair_claimed("f", [], limit=2)
    assert cursors.poll_starts(103.0, listening=True) == {"f": ClaimKey(0, 21.0, 4)}


def test_a_job_told_behind_the_key_moves_it_back_and_the_walk_to_its_batch():
    cursors = ClaimCursors()
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(1, 10.0, None, 4, (11.0, 3)), _job(2, 10.0, 4, 4, (11.0, 3)),
                               _job(3, 11.0, 5, 4, (11.0, 3))], limit=5)
    cursors.observed({"f": ClaimKey(0, 50.0)}, {"f": 9})  # ahead: nothing to do
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 11.0, 3), 4, {
        4: ClaimKey(0, 10.0, 2), 5: ClaimKey(0, 11.0, 3)})
    # A member of batch 2 released at 10.5: the walk moves back to batch 2, and every
    # cursor past the key to it (its batch is not told, only the lowest of a notice's).
    cursors.observed({"f": ClaimKey(0, 10.5)}, {"f": 2})
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 10.5), 2, {
        4: ClaimKey(0, 10.0, 2), 5: ClaimKey(0, 10.5)})
    # Told of jobs of no batch: the walk stays.
    cursors.observed({"f": ClaimKey(0, 3.0)}, {"f": None})
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 3.0), 2, {
        4: ClaimKey(0, 3.0), 5: ClaimKey(0, 3.0)})
    # A poll's find, or an older schema's notice, does not name a batch: from the lowest.
    cursors.observed({"f": ClaimKey(0, 1.0, 7)})
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 1.0), None, {
        4: ClaimKey(0, 1.0), 5: ClaimKey(0, 1.0)})
    cursors.forget()
    assert cursors.fair_start("f") == FairStart(None, None)


def test_a_member_released_while_the_claim_is_out_holds_its_batch_cursor_back():
    """Members of one batch share a priority and run_at: a release named at that key
    while a claim is out ties with where the claim ended in the batch, and the claim's
    snapshot may not have seen it."""
    cursors = ClaimCursors()
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(1, 10.0, 4, 4), _job(2, 10.0, 4, 4)], limit=2)
    cursors.fair_start("f")
    cursors.observed({"f": ClaimKey(0, 10.0)}, {"f": 4})  # job 1 released meanwhile
    cursors.fair_claimed("f", [_job(3, 10.0, 4, 4), _job(4, 10.0, 4, 4)], limit=2)
    assert cursors.fair_start("f").batches == {4: ClaimKey(0, 10.0)}


def test_the_batch_cursors_kept_are_bounded(monkeypatch):
    monkeypatch.setattr("supervisor.engine.cursors.BATCH_KEYS_MAX", 3)
    cursors = ClaimCursors()
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(i, 10.0 + i, i, 1) for i in range(1, 6)], limit=9)
    assert sorted(cursors.fair_start("f").batches) == [3, 4, 5]


# -- with the statement --------------------------------------------------------------------

def _batch(conn: psycopg.Connection, n: int) -> list[int]:
    return enqueue_many("k", [{}] * n, then=Callback("cb", {}), queue="f", conn=conn).ids


def _claim(store: Store, cursors: ClaimCursors, limit: int) -> list[ClaimedJob]:
    start = cursors.fair_start("f")
    jobs = store.run_claim(ClaimRequest("f", ["k"], limit, start=start.loose, fair=True,
                                        first_batch=start.first_batch,
                                        batch_starts=start.batches)).jobs
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


def test_a_member_made_available_behind_the_batch_cursor_is_taken_after_a_head_poll(conn):
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


def test_the_keys_channel_is_read_with_its_batch_and_without():
    """What the schema's notices say (queue, priority, run_at, ``b`` + batch) and what a
    database whose schema predates the batch field says (the first three)."""
    db = Database("postgresql:///unused", "me", 30.0, selectors.DefaultSelector(),
                  statement_timeout=1.0)
    for payload in ("f\t0\t20.5\tb9", "f\t0\t30\tb4", "g\t1\t5\tb", "a\tb\t2\t7\tb3",
                    "old\t0\t8", "junk\t0\t8\tbx", "junk\tx\t8\tb1"):
        db._note_key(payload)
    assert db.take_notified_keys() == {"f": ClaimKey(0, 20.5), "g": ClaimKey(1, 5.0),
                                       "a\tb": ClaimKey(2, 7.0), "old": ClaimKey(0, 8.0)}
    # The lowest batch per queue; None: jobs of no batch; an older schema's: left out.
    assert db.take_notified_batches() == {"f": 4, "g": None, "a\tb": 3}
    # Every batch named, for the newcomer rule (a higher one told beside a lower one).
    assert db.take_named_batches() == {"f": {9, 4}, "a\tb": {3}}
    assert db.take_notified_keys() == {} and db.take_notified_batches() == {}
    assert db.take_named_batches() == {}


def test_a_member_made_available_behind_the_cursors_is_taken_once_its_notice_is_told(dsn, conn):
    """A released member of a batch the walk and its batch cursor passed: the schema's
    notice names its batch and key, and the next claim takes it (no poll needed)."""
    listener = psycopg.connect(dsn, autocommit=True)
    listener.execute("LISTEN supervisor_job_keys")
    try:
        early = _batch(conn, 2)
        _batch(conn, 2)
        store, cursors = Store(conn, "me"), ClaimCursors()
        taken = _claim(store, cursors, 10)
        assert len(taken) == 4
        newest = _batch(conn, 2)
        assert {job.id for job in _claim(store, cursors, 10)} == set(newest)
        assert cursors.fair_start("f").first_batch == _batch_id(conn, newest[0])
        list(listener.notifies(timeout=0.2))  # the inserts' notices: not this test's
        store.release([Attempt(job.id, job.attempt) for job in taken if job.id == early[0]])
        db = Database("postgresql:///unused", "me", 30.0, selectors.DefaultSelector(),
                      statement_timeout=1.0)
        for note in listener.notifies(timeout=0.5):
            db._note_key(note.payload)
        cursors.observed(db.take_notified_keys(), db.take_notified_batches())
        # Back to its batch, not to the lowest: the walk does not start over.
        assert cursors.fair_start("f").first_batch == _batch_id(conn, early[0])
        assert [job.id for job in _claim(store, cursors, 10)] == [early[0]]
    finally:
        listener.close()


def _batch_id(conn: psycopg.Connection, job_id: int) -> int:
    row = conn.execute("SELECT batch_id FROM supervisor.jobs WHERE id = %s",
                       (job_id,)).fetchone()
    assert row is not None
    return int(row[0])


def test_a_polls_find_leaves_the_batch_cursors_where_a_notice_moves_them():
    """A busy fair queue is polled from the head: its find is the first waiting member
    of the first batch, behind every later batch's cursor, and says nothing about them."""
    cursors = ClaimCursors()
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(1, 10.0, 4, 4, (10.0, 1)), _job(9, 20.0, 5, 4, (10.0, 1))],
                         limit=2)
    keys = {4: ClaimKey(0, 10.0, 1), 5: ClaimKey(0, 20.0, 9)}
    assert cursors.fair_start("f").batches == keys
    cursors.observed({"f": ClaimKey(0, 10.0, 2)}, polled=True)  # batch 4's next member
    assert cursors.fair_start("f").batches == keys
    # Even one behind the group's key (a poll's snapshot older than the claim in
    # flight): the key moves back, the walk stays.
    cursors.observed({"f": ClaimKey(0, 5.0, 2)}, polled=True)
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 5.0), 4, keys)
    cursors.observed({"f": ClaimKey(0, 10.0)}, {"f": 4})  # a notice: both move back
    assert cursors.fair_start("f").batches == {4: ClaimKey(0, 10.0), 5: ClaimKey(0, 10.0)}


def test_a_claim_out_across_a_polls_find_still_learns_and_a_walk_moved_back_stays():
    cursors = ClaimCursors()
    cursors.fair_start("f")
    cursors.fair_claimed("f", [_job(1, 10.0, 4, 4, (10.0, 1)), _job(9, 20.0, 5, 4, (10.0, 1))],
                         limit=2)
    # A poll's find from a snapshot older than the claim out: the claim still counts.
    cursors.fair_start("f")
    cursors.observed({"f": ClaimKey(0, 10.0, 1)}, polled=True)
    cursors.fair_claimed("f", [_job(2, 10.0, 4, 5, (10.0, 2)), _job(10, 20.0, 5, 5, (10.0, 2))],
                         limit=2)
    assert cursors.fair_start("f") == FairStart(ClaimKey(0, 10.0, 2), 5, {
        5: ClaimKey(0, 20.0, 10)})
    # A notice moves the walk back to batch 3 while a claim is out: the claim's own
    # first batch (computed before it) does not overwrite it.
    cursors.fair_start("f")
    cursors.observed({"f": ClaimKey(0, 30.0)}, {"f": 3})
    cursors.fair_claimed("f", [_job(11, 20.0, 5, 5, (20.0, 11))], limit=2)
    assert cursors.fair_start("f").first_batch == 3
