"""Claim cursors (issue 40): a plain claim's scan starts past the jobs its queue already
claimed, so a held MVCC horizon does not make it walk their index entries; a job made
available behind the cursor is found by the next poll, and nothing runs twice or is
left behind while a snapshot is held beside a running supervisor."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
import pytest
from e2e import ROOT, Supervisor, read_log, wait_until

from shared.batches import Callback
from shared.enqueue import enqueue, enqueue_many
from shared.jobs import ClaimedJob
from supervisor.db import Attempt, ClaimKey, ClaimRequest, Completion, Store
from supervisor.engine.cursors import (
    DUE_SLACK,
    HEAD_POLL_EVERY,
    ClaimCursors,
)
from supervisor.engine.horizon import AFTER_HOLD, HELD_SPACING, HELD_SPACING_MAX

if str(ROOT) not in sys.path:  # scripts/ is not an installed package
    sys.path.insert(0, str(ROOT))

from scripts.chaos.soak import SoakSettings, run_soak, summary

POLL = "0.3"  # the supervisor's poll interval in the process tests: the rescan bound


def _job(job_id: int, priority: int, run_at: float) -> ClaimedJob:
    return ClaimedJob(id=job_id, kind="k", queue="q", attempt=1, max_attempts=3,
                      priority=priority, timeout=None, args_json="{}", run_at=run_at)


# -- the cursors' bookkeeping (no database) -----------------------------------------------

def test_a_queue_never_claimed_scans_from_the_head_then_past_its_last_claim():
    cursors = ClaimCursors()
    assert cursors.start("q") is None
    cursors.claimed("q", [_job(1, 0, 100.0), _job(2, 0, 105.0), _job(3, 1, 50.0)])
    assert cursors.start("q") == ClaimKey(1, 50.0, 3)  # the last in claim order
    assert cursors.start("other") is None


def test_an_empty_claim_leaves_the_cursor_where_it_was():
    cursors = ClaimCursors()
    cursors.start("q")
    cursors.claimed("q", [_job(1, 0, 100.0)])
    cursors.start("q")
    cursors.claimed("q", [])
    assert cursors.start("q") == ClaimKey(0, 100.0, 1)


def test_a_job_found_behind_moves_the_cursor_back_never_forward():
    cursors = ClaimCursors()
    cursors.start("q")
    cursors.claimed("q", [_job(7, 5, 100.0)])
    cursors.observed({"q": ClaimKey(5, 200.0)})  # ahead: nothing to do
    cursors.observed({"q": ClaimKey(5, 100.0, 8)})  # a poll's next job, ahead too
    assert cursors.start("q") == ClaimKey(5, 100.0, 7)
    # A notification of a job at the cursor's own priority and run_at (its id unknown):
    # it may be behind, so the scan starts before every job of that key.
    cursors.observed({"q": ClaimKey(5, 100.0)})
    assert cursors.start("q") == ClaimKey(5, 100.0, 0)
    cursors.observed({"q": ClaimKey(0, 300.0, 9)})  # a higher priority: behind
    assert cursors.start("q") == ClaimKey(0, 300.0, 0)


def test_a_claim_out_while_the_cursor_moved_back_does_not_move_it_forward():
    cursors = ClaimCursors()
    cursors.start("q")
    cursors.claimed("q", [_job(1, 0, 100.0)])
    cursors.start("q")  # a claim goes out after 100 ...
    cursors.observed({"q": ClaimKey(0, 10.0)})  # ... a job at 10 is told ...
    cursors.claimed("q", [_job(2, 0, 120.0)])  # ... the claim answers, past 10
    assert cursors.start("q") == ClaimKey(0, 10.0)
    cursors.claimed("q", [_job(3, 0, 10.0), _job(4, 0, 130.0)])  # sent after the move
    assert cursors.start("q") == ClaimKey(0, 130.0, 4)


def test_a_job_told_at_the_cursor_while_a_claim_is_out_is_not_passed():
    # Found by the pause-and-resume storm (tests/test_run_pipeline.py): the cursor had
    # already moved back to (0, 100.0, 0) for an earlier release; a claim went out from
    # there; a second release of jobs at that key committed while it was out, so its
    # notice moved nothing; the claim's answer (its snapshot before the release) then
    # moved the cursor past them, and they waited for the poll from the head.
    cursors = ClaimCursors()
    cursors.start("q")
    cursors.claimed("q", [_job(5, 0, 100.0)])
    cursors.observed({"q": ClaimKey(0, 100.0)})  # the first release
    assert cursors.start("q") == ClaimKey(0, 100.0)  # the claim goes out from here
    cursors.observed({"q": ClaimKey(0, 100.0)})  # the second release, while it is out
    cursors.claimed("q", [_job(6, 0, 100.0), _job(7, 0, 100.0)])
    assert cursors.start("q") == ClaimKey(0, 100.0)
    # A job told ahead of where the claim ended does not hold the cursor back.
    cursors.observed({"q": ClaimKey(0, 500.0)})
    cursors.claimed("q", [_job(8, 0, 100.0), _job(9, 0, 120.0)])
    assert cursors.start("q") == ClaimKey(0, 120.0, 9)
    # One a poll found (its id known) holds it just before that job.
    cursors.observed({"q": ClaimKey(0, 120.0, 12)})
    cursors.claimed("q", [_job(12, 0, 120.0), _job(13, 0, 130.0)])
    assert cursors.start("q") == ClaimKey(0, 120.0, 11)


def test_polls_look_from_the_cursors_but_from_the_head_now_and_then_and_without_listen():
    cursors = ClaimCursors()
    cursors.start("q")
    cursors.claimed("q", [_job(1, 0, 100.0)])
    assert cursors.poll_starts(0.0, listening=True) == {}  # the first: from the head
    assert cursors.poll_starts(1.0, listening=True) == {"q": ClaimKey(0, 100.0, 1)}
    assert cursors.poll_starts(HEAD_POLL_EVERY, listening=True) == {}
    assert cursors.poll_starts(HEAD_POLL_EVERY + 1, listening=True) != {}
    assert cursors.poll_starts(HEAD_POLL_EVERY + 2, listening=False) == {}


def test_a_held_horizon_spaces_the_poll_from_the_head_by_its_age_until_it_lets_go():
    cursors = ClaimCursors()
    cursors.start("q")
    cursors.claimed("q", [_job(1, 0, 100.0)])
    assert cursors.poll_starts(0.0, listening=True) == {}  # from the head
    cursors.horizon_held(300.0, 0.5)  # a look: held five minutes
    gap = HELD_SPACING * 300.0
    assert HEAD_POLL_EVERY < gap < HELD_SPACING_MAX
    assert cursors.poll_starts(HEAD_POLL_EVERY, listening=True) != {}
    assert cursors.poll_starts(gap - 1, listening=True) != {}
    assert cursors.poll_starts(gap, listening=True) == {}  # from the head again
    cursors.horizon_held(86_400.0, gap + 1)  # a day: no longer than the cap
    assert cursors.poll_starts(gap + HELD_SPACING_MAX - 1, listening=True) != {}
    assert cursors.poll_starts(gap + HELD_SPACING_MAX, listening=True) == {}
    last = gap + HELD_SPACING_MAX
    # A look finds it let go, long after the last poll from the head: the next waits
    # AFTER_HOLD from that look (the versions the hold kept stay until a vacuum).
    cursors.horizon_held(0.0, last + 1000)
    assert cursors.poll_starts(last + 1000 + AFTER_HOLD - 1, listening=True) != {}
    assert cursors.poll_starts(last + 1000 + AFTER_HOLD, listening=True) == {}
    # then every minute, as before the hold
    cursors.horizon_held(0.0, last + 1000 + AFTER_HOLD + 1)
    now = last + 1000 + AFTER_HOLD
    assert cursors.poll_starts(now + HEAD_POLL_EVERY - 1, listening=True) != {}
    assert cursors.poll_starts(now + HEAD_POLL_EVERY, listening=True) == {}


def test_a_job_told_before_it_is_due_is_told_again_once_due():
    # A plain-SQL row inserted available with a future run_at: its notification moves
    # the cursor back, a claim of a lower priority passes it before it is due, and
    # nothing tells it when it becomes due but the cursors themselves.
    wall = [1_000.0]
    cursors = ClaimCursors(wall=lambda: wall[0])
    cursors.start("q")
    cursors.claimed("q", [_job(1, 5, 990.0)])
    later = ClaimKey(0, 1_030.0)  # priority 0, due in 30 s
    cursors.observed({"q": later})
    assert cursors.start("q") == later.before()
    cursors.claimed("q", [_job(2, 5, 995.0)])  # lower priority, due: passes it
    assert cursors.poll_starts(0.0, listening=True) == {}  # the first poll: the head
    wall[0] = 1_030.0 + DUE_SLACK - 0.1
    assert cursors.poll_starts(1.0, listening=True) == {"q": ClaimKey(5, 995.0, 2)}
    wall[0] = 1_030.0 + DUE_SLACK
    assert cursors.poll_starts(2.0, listening=True) == {"q": later.before()}
    assert cursors.poll_starts(3.0, listening=True) == {"q": later.before()}  # told once


def test_forgetting_sends_every_queue_back_to_the_head():
    cursors = ClaimCursors()
    cursors.start("q")
    cursors.claimed("q", [_job(1, 0, 100.0)])
    cursors.forget()
    assert cursors.start("q") is None


# -- the statements ------------------------------------------------------------------------

def _run_at(conn: psycopg.Connection, job_id: int) -> float:
    return conn.execute("SELECT extract(epoch FROM run_at)::float8 FROM supervisor.jobs "
                        "WHERE id = %s", (job_id,)).fetchone()[0]


def test_a_claim_from_a_key_takes_nothing_before_it_and_returns_each_jobs_key(conn):
    early = enqueue("k", priority=0, conn=conn)
    conn.execute("UPDATE supervisor.jobs SET run_at = now() - interval '1 hour' "
                 "WHERE id = %s", (early,))
    late = enqueue("k", priority=0, conn=conn)
    urgent = enqueue("k", priority=-1, conn=conn)
    store = Store(conn, "me")
    start = ClaimKey(0, _run_at(conn, late))
    taken = store.run_claim(ClaimRequest("default", ["k"], 10, start=start)).jobs
    assert [job.id for job in taken] == [late]  # the earlier and the more urgent stay
    assert ClaimKey.of(taken[0]) == ClaimKey(0, pytest.approx(start.run_at), late)
    assert [job.id for job in store.claim("default", ["k"], 10)] == [urgent, early]


def test_a_key_read_back_from_a_claim_starts_exactly_after_its_job(conn):
    # One statement: the same run_at to the microsecond, told apart by id alone. The
    # run_at goes through a float8 and back (to_timestamp) without losing a microsecond.
    conn.execute("INSERT INTO supervisor.jobs (kind, run_at) SELECT 'k', "
                 "'2026-12-04T22:37:04.123457Z' FROM generate_series(1, 3)")
    store = Store(conn, "me")
    first = store.run_claim(ClaimRequest("default", ["k"], 1, start=None)).jobs
    rest = store.run_claim(ClaimRequest("default", ["k"], 10,
                                        start=ClaimKey.of(first[0]))).jobs
    assert [job.id for job in rest] == [first[0].id + 1, first[0].id + 2]
    store.release([Attempt(job.id, job.attempt) for job in rest])
    again = store.run_claim(ClaimRequest("default", ["k"], 10, start=ClaimKey.of(rest[0])))
    assert [job.id for job in again.jobs] == [rest[1].id]


def test_the_poll_names_each_queues_first_waiting_job_in_claim_order(conn):
    last = enqueue("k", priority=3, conn=conn)
    first = enqueue("k", priority=1, conn=conn)
    enqueue("k", priority=1, queue="other", conn=conn)
    store = Store(conn, "me")
    found = store.queues_with_work(["default", "other", "empty"], ["k"])
    assert set(found) == {"default", "other"}
    assert found["default"] == ClaimKey(1, pytest.approx(_run_at(conn, first)), first)
    assert store.queues_with_work(["default"], ["not-k"]) == {}
    # From a cursor: only what waits past it.
    past = store.queues_with_work(["default", "other"], ["k"],
                                  {"default": ClaimKey(2, 0.0), "other": ClaimKey(5, 0.0)})
    assert past == {"default": ClaimKey(3, pytest.approx(_run_at(conn, last)), last)}


def _told(listener: psycopg.Connection) -> list[tuple[str, int, float, str]]:
    """The notices on the keys channel so far: (queue, priority, run_at epoch, batch
    field)."""
    told = []
    for note in listener.notifies(timeout=0.5):
        queue, priority, run_at, batch = note.payload.rsplit("\t", 3)
        told.append((queue, int(priority), float(run_at), batch))
    return sorted(told)


def _keys(listener: psycopg.Connection) -> list[tuple[str, int, float]]:
    """The keys named on the keys channel so far: (queue, priority, run_at epoch)."""
    return [(queue, priority, run_at) for queue, priority, run_at, _ in _told(listener)]


def test_the_schema_names_the_key_of_each_job_made_available_and_only_those(dsn, conn):
    listener = psycopg.connect(dsn, autocommit=True)
    listener.execute("LISTEN supervisor_job_keys")
    try:
        # One insert statement: one key per queue, its first job in claim order.
        conn.execute("""INSERT INTO supervisor.jobs (kind, queue, priority, run_at) VALUES
            ('k', E'a\\tb', 2, '2026-01-01T00:00:10Z'), ('k', E'a\\tb', 1, '2026-01-01T00:00:20Z'),
            ('k', 'c', 0, '2026-01-01T00:00:00Z'),
            ('k', 'c', 0, '2026-01-01T00:00:00Z')""")
        epoch = 1767225600  # 2026-01-01T00:00:00Z
        assert _keys(listener) == [("a\tb", 1, epoch + 20), ("c", 0, epoch)]
        later = enqueue("k", queue="d", delay=3600, conn=conn)
        assert _keys(listener) == []  # scheduled: not available yet
        conn.execute("UPDATE supervisor.jobs SET state = 'available', "
                     "run_at = '2026-01-01T00:00:05Z' WHERE id = %s", (later,))
        assert _keys(listener) == [("d", 0, epoch + 5)]
        conn.execute("UPDATE supervisor.jobs SET priority = -3 WHERE id = %s", (later,))
        assert _keys(listener) == [("d", -3, epoch + 5)]  # moved earlier in the order
        conn.execute("UPDATE supervisor.jobs SET priority = 7 WHERE id = %s", (later,))
        store = Store(conn, "me")
        taken = store.claim("d", ["k"], 10)
        store.complete([Completion(taken[0].id, taken[0].attempt, "null")])
        assert _keys(listener) == []  # moved later, claimed, completed: nothing to tell
    finally:
        listener.close()


def test_the_schema_names_the_lowest_batch_a_notice_made_available(dsn, conn):
    """A fair claim's walk of the batches moves back to it (supervisor.engine.cursors)."""
    listener = psycopg.connect(dsn, autocommit=True)
    listener.execute("LISTEN supervisor_job_keys")
    try:
        with conn.transaction():
            first = enqueue_many("k", [{}] * 2, then=Callback("cb", {}), queue="f", conn=conn)
            second = enqueue_many("k", [{}], then=Callback("cb", {}), queue="f", conn=conn)
            enqueue("k", queue="g", conn=conn)
        batches = sorted(told[3] for told in _told(listener) if told[0] == "f")
        assert batches == [f"b{first.id}", f"b{second.id}"]
        assert [told[3] for told in _told(listener)] == []
        enqueue("k", queue="g", conn=conn)
        assert [told[3] for told in _told(listener)] == ["b"]  # a job of no batch
        taken = Store(conn, "me").claim("f", ["k"], 1)
        Store(conn, "me").release([Attempt(taken[0].id, taken[0].attempt)])
        batch_of = conn.execute("SELECT batch_id FROM supervisor.jobs WHERE id = %s",
                                (taken[0].id,)).fetchone()
        assert batch_of is not None
        assert [told[3] for told in _told(listener)] == [f"b{batch_of[0]}"]
    finally:
        listener.close()


# -- a running supervisor beside a held horizon --------------------------------------------

def _hold_snapshot(dsn: str) -> psycopg.Connection:
    """An idle REPEATABLE READ transaction that has read supervisor.jobs (a dump)."""
    holder = psycopg.connect(dsn, application_name="test-rr-holder")
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT count(*) FROM supervisor.jobs").fetchone()
    return holder


def _hold_xid(dsn: str) -> psycopg.Connection:
    """An idle transaction holding an xid (a client left idle in transaction)."""
    holder = psycopg.connect(dsn, application_name="test-xid-holder")
    holder.execute("SELECT txid_current()")
    return holder


def _runs(log: Path) -> dict[int, int]:
    counts: dict[int, int] = {}
    for record in read_log(log):
        counts[record["id"]] = counts.get(record["id"], 0) + 1
    return counts


def _completed(dsn: str, ids: list[int]) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE id = ANY(%s) "
                            "AND state = 'completed'", (ids,)).fetchone()[0] == len(ids)


def test_jobs_run_exactly_once_while_a_snapshot_and_an_xid_are_held(dsn, tmp_path):
    log = tmp_path / "runs.log"
    snapshot, xid = _hold_snapshot(dsn), _hold_xid(dsn)
    sup = Supervisor(dsn, "-n", "2", "--poll-interval", POLL, log_path=log)
    try:
        ids: list[int] = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            for wave in range(6):  # claims in between: the cursor moves as the queue fills
                ids += [enqueue("e2e_noop", {"n": wave}, conn=conn) for _ in range(50)]
                wait_until(lambda done=list(ids): _completed(dsn, done), timeout=90,
                           what="a wave done")
    finally:
        sup.stop()
        snapshot.close()
        xid.close()
    assert _runs(log) == dict.fromkeys(ids, 1)


@pytest.mark.parametrize("listen", [True, False], ids=["notified", "poll-only"])
def test_jobs_made_available_behind_the_cursor_are_claimed(dsn, tmp_path, listen):
    # Told by the keys channel at their commit, or (poll only) found by the next poll,
    # which then reads from the head of the index.
    log = tmp_path / "runs.log"
    snapshot = _hold_snapshot(dsn)
    late = psycopg.connect(dsn, application_name="test-late-producer")
    flags = () if listen else ("--no-listen",)
    sup = Supervisor(dsn, "-n", "2", "--poll-interval", POLL, *flags, log_path=log)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            # A producer's transaction opens first: its job's run_at is its start ...
            late_id = enqueue("e2e_noop", conn=late)
            # ... a later-due job, to be made available behind the cursor by an update
            # (a retry due earlier, a priority raised) ...
            moved = enqueue("e2e_noop", delay=3600, conn=conn)
            # ... then others are claimed, moving the cursor past both.
            ahead = [enqueue("e2e_noop", conn=conn) for _ in range(40)]
            wait_until(lambda: _completed(dsn, ahead), timeout=60, what="jobs ahead done")
            late.commit()  # committed after the claims that passed its run_at
            conn.execute("UPDATE supervisor.jobs SET state = 'available', priority = -5, "
                         "run_at = now() - interval '1 hour' WHERE id = %s", (moved,))
            urgent = enqueue("e2e_noop", priority=-10, conn=conn)  # a higher priority
            (older,) = conn.execute(  # a plain-SQL producer's job due long ago
                "INSERT INTO supervisor.jobs (kind, run_at) "
                "VALUES ('e2e_noop', now() - interval '1 day') RETURNING id").fetchone()
            behind = [late_id, moved, urgent, older]
            # At once, or by the next poll (0.3 s here). Generous for a loaded machine,
            # yet shorter than the polls from the head that would find them otherwise.
            wait_until(lambda: _completed(dsn, behind), timeout=HEAD_POLL_EVERY / 2,
                       what="the jobs behind the cursor done")
    finally:
        sup.stop()
        late.close()
        snapshot.close()
    runs = _runs(log)
    assert all(runs.get(job_id) == 1 for job_id in [*behind, *ahead]), runs


def test_a_row_inserted_available_for_later_runs_when_due_though_lower_priorities_passed_it(
        dsn, tmp_path):
    # A plain-SQL producer inserts a row as available, due in 3 s, at priority 0; jobs of
    # priority 5 due now are claimed meanwhile, moving the cursor past it. When it comes
    # due nothing notifies: the cursor itself tells it again (DUE_SLACK after its
    # run_at), well before the poll from the head a minute later would find it.
    log = tmp_path / "runs.log"
    sup = Supervisor(dsn, "-n", "2", "--poll-interval", POLL, log_path=log)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            first = enqueue("e2e_noop", conn=conn)  # once it ran, the supervisor listens
            wait_until(lambda: _completed(dsn, [first]), timeout=60, what="the first job")
            (later,) = conn.execute(
                "INSERT INTO supervisor.jobs (kind, priority, run_at) "
                "VALUES ('e2e_noop', 0, now() + interval '3 seconds') RETURNING id"
            ).fetchone()
            lower = [enqueue("e2e_noop", priority=5, conn=conn) for _ in range(20)]
            wait_until(lambda: _completed(dsn, lower), timeout=60, what="the lower ones")
            wait_until(lambda: _completed(dsn, [later]), timeout=HEAD_POLL_EVERY / 3,
                       what="the row due later, done once due")
    finally:
        sup.stop()
    assert _runs(log).get(later) == 1


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("holder", ["rr", "xid"])
def test_a_kill_storm_beside_a_held_horizon_runs_no_job_twice(throwaway_server, tmp_path,
                                                               holder):
    # The short chaos run of tests/test_chaos_short.py with a horizon held throughout:
    # children SIGKILLed, a supervisor SIGKILLed, PostgreSQL restarted (the holder opened
    # again after it), while the claims start at their cursors.
    settings = SoakSettings(jobs=1500, supervisors=2, children=2, lease_ttl=3.0, grace=5.0,
                            kill_interval=0.3, supervisor_kills=1, db_restarts=1,
                            timeout=150.0, stall=60.0, seed=11, mix={"chaos_sleep": 0.08},
                            holder=holder)
    report = run_soak(settings, throwaway_server, tmp_path, say=lambda _line: None)
    text = summary(report, settings)
    check = report.check
    assert check is not None, text
    assert check.jobs == 1500 and set(check.states) <= {"completed", "discarded"}, text
    assert any("holding the horizon" in event for event in report.events), text
    assert report.supervisor_kills == 1 and report.db_restarts == 1, text
    assert check.unexplained_reruns == 0, text
    assert not report.violations, text
