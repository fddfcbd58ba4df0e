"""Counting the finished jobs has a budget, and when it runs out the operator is told.

The finished jobs are most of ``supervisor.jobs`` (kept for the retention: a week at
1,000 jobs/s is 600 million rows), and counting them reads each one: ``supervisor
status`` took 1.1 s on 5.2 million rows, and grew without end with the table. Past
``FINISHED_COUNT_BUDGET`` the count is cancelled: the finished states show ``?`` (null
in JSON, no sample in ``/metrics``) with a line saying why, the jobs in flight are
counted exactly as always, ``--count-finished`` waits for the count. The dashboard keeps
its last count when a recount runs out of budget.
"""

from __future__ import annotations

import asyncio

import orjson
import psycopg
import pytest
from click.testing import CliRunner

from supervisor import admin
from supervisor.cli import status as cli_status
from supervisor.cli.main import main
from supervisor.dashboard import metrics, queries
from supervisor.dashboard.counts import FinishedCounts

pytestmark = pytest.mark.timeout(120)

FINISHED = 200_000
FINISHED_STATES = ("completed", "discarded", "cancelled", "expired")


@pytest.fixture()
def big_history(conn):
    """``FINISHED`` completed jobs in queue ``images`` beside a few in flight; analyzed,
    so the planner's row count is known."""
    conn.execute(
        "INSERT INTO supervisor.jobs (kind, queue, state, attempt, attempted_at, finished_at) "
        "SELECT 'k', 'images', 'completed', 1, now() - interval '1 hour', "
        "now() - interval '1 hour' FROM generate_series(1, %s)", (FINISHED,))
    conn.execute("INSERT INTO supervisor.jobs (kind, queue) "
                 "SELECT 'k', 'images' FROM generate_series(1, 3)")
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, run_at) "
                 "VALUES ('k', 'mail', 'scheduled', now() + interval '1 hour')")
    conn.execute("ANALYZE supervisor.jobs")
    return conn


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_a_count_waiting_past_its_budget_is_cancelled_not_waited_for(dsn, conn):
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, finished_at) "
                 "VALUES ('k', 'images', 'completed', now())")
    with psycopg.connect(dsn) as locker:
        locker.execute("LOCK TABLE supervisor.jobs IN ACCESS EXCLUSIVE MODE")
        tally = admin.finished_counts(conn, budget=0.2)
    assert not tally.counted and tally.by_queue == {} and tally.budget == 0.2
    assert conn.execute("SHOW statement_timeout").fetchone() == ("0",)  # SET LOCAL only
    assert admin.finished_counts(conn, budget=0.2) == admin.FinishedTally(
        {"images": {"completed": 1}}, budget=0.2)


def test_status_past_the_budget_shows_the_finished_states_as_not_counted(
        dsn, big_history, monkeypatch):
    # 200,000 rows take far longer than a millisecond to count; the real budget is 2 s.
    monkeypatch.setattr(admin, "FINISHED_COUNT_BUDGET", 0.001)
    done = invoke("status", "--json", "--dsn", dsn)
    assert done.exit_code == 0, done.output
    snapshot = orjson.loads(done.output)
    assert snapshot["finished"]["counted"] is False
    assert snapshot["finished"]["estimated_rows"] == pytest.approx(FINISHED, rel=0.1)
    queues = {q["name"]: q["counts"] for q in snapshot["queues"]}
    assert queues["images"]["available"] == 3 and queues["mail"]["scheduled"] == 1
    for state in FINISHED_STATES:
        assert queues["images"][state] is None and queues["mail"][state] is None

    text = invoke("status", "--dsn", dsn)
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    row = dict(zip(lines[0].split(), next(ln for ln in lines if ln.startswith("images"))
                   .split(), strict=False))
    assert (row["AVAIL"], row["DONE"], row["DISC"], row["CANC"], row["EXP"]) == \
        ("3", "?", "?", "?", "?")
    assert "finished jobs not counted: counting them took over 0.001 s" in text.output
    assert "--count-finished" in text.output

    waited = orjson.loads(invoke("status", "--json", "--count-finished", "--dsn", dsn).output)
    assert waited["finished"]["counted"] is True
    counts = {q["name"]: q["counts"] for q in waited["queues"]}["images"]
    assert (counts["completed"], counts["available"], counts["discarded"]) == (FINISHED, 3, 0)
    assert "not counted" not in invoke("status", "--count-finished", "--dsn", dsn).output


def test_the_dashboard_totals_and_metrics_leave_out_what_was_not_counted(big_history):
    tally = admin.finished_counts(big_history, budget=0.001)
    assert not tally.counted
    data = queries.overview(big_history, tally)
    assert data["totals"]["available"] == 3 and data["totals"]["scheduled"] == 1
    assert all(data["totals"][state] is None for state in FINISHED_STATES)
    text = metrics.render(data["queues"])
    assert 'supervisor_queue_jobs{queue="images",state="available"} 3' in text
    assert 'state="completed"' not in text


class _Database:
    """The dashboard's database as ``FinishedCounts`` uses it: ``run(fn, *args)``,
    answering each count with the next of ``tallies``."""

    def __init__(self, *tallies: admin.FinishedTally) -> None:
        self.tallies = list(tallies)
        self.budgets: list[float] = []

    async def run(self, fn, budget):
        assert fn is admin.finished_counts
        self.budgets.append(budget)
        return self.tallies.pop(0)


def test_the_dashboard_keeps_its_last_count_when_a_recount_runs_out_of_budget():
    counted = admin.FinishedTally({"images": {"completed": 7}}, budget=10.0)
    missing = admin.FinishedTally({}, counted=False, budget=10.0, estimated_rows=9_000_000)

    async def scenario():
        cache = FinishedCounts(every=30.0, budget=10.0)
        first = _Database(missing, counted, missing)
        assert (await cache.get(first))[0] == missing  # nothing counted yet: said so
        cache.expire()
        assert (await cache.get(first))[0] == counted
        cache._counted_at -= 40.0  # the count is 40 s old
        cache.expire()
        value, age = await cache.get(first)
        assert value == counted and age >= 40.0  # the last count stays, with its age
        assert first.budgets == [10.0, 10.0, 10.0]
        value, age = await cache.get(first)  # tried just now: no recount yet
        assert value == counted and first.tallies == []

    asyncio.run(scenario())


def test_a_watch_counts_a_slow_finished_count_again_only_after_ten_times_its_length(
        monkeypatch):
    clock = [100.0]
    counts: list[float | None] = []

    def finished_counts(conn, budget):
        counts.append(budget)
        clock[0] += 2.0  # ran its whole 2 s budget out
        return admin.FinishedTally({}, counted=False, budget=budget)

    monkeypatch.setattr(cli_status.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(admin, "finished_counts", finished_counts)
    pacer = cli_status.FinishedPacer(2.0)
    for _ in range(10):  # redraws 2 s apart: 20 s
        pacer.tally(None)
        clock[0] += 2.0
    assert counts == [2.0, 2.0]  # at 0 s and at 20 s: a tenth of the time
    quick = cli_status.FinishedPacer(None)

    def instant(conn, budget):
        counts.append(budget)
        return admin.FinishedTally({"q": {"completed": 1}}, budget=budget)

    monkeypatch.setattr(admin, "finished_counts", instant)
    for _ in range(3):
        quick.tally(None)
        clock[0] += 2.0
    assert counts[2:] == [None, None, None]  # an instant count: at every redraw


def test_the_dashboard_rests_a_count_that_ran_out_of_budget_ten_times_its_length(
        monkeypatch):
    from supervisor.dashboard import counts as dashboard_counts

    clock = [1000.0]
    monkeypatch.setattr(dashboard_counts.time, "monotonic", lambda: clock[0])
    counted = admin.FinishedTally({"images": {"completed": 7}}, budget=10.0)
    missing = admin.FinishedTally({}, counted=False, budget=10.0)

    class Slow(_Database):
        async def run(self, fn, budget):
            clock[0] += 10.0  # each count runs its whole budget out
            return await super().run(fn, budget)

    async def scenario():
        cache = FinishedCounts(every=30.0, budget=10.0)
        db = Slow(counted, *[missing] * 10)
        await cache.get(db)
        began = clock[0]
        while clock[0] - began < 300.0:  # a tab refreshing every 3 s for 5 minutes
            await cache.get(db)
            await asyncio.sleep(0)  # let a recount begun in the background run
            clock[0] += 3.0
        return db

    db = asyncio.run(scenario())
    # The first count, then a try each 100 s or so (ten times its 10 s), not each 30 s.
    assert 3 <= len(db.budgets) <= 4, db.budgets


def test_a_count_without_budget_cancelled_by_the_servers_timeout_is_said_so():
    # --count-finished sets no budget; a role's own statement_timeout may still cancel.
    note = cli_status.finished_note({"counted": False, "budget": None,
                                     "estimated_rows": 9_000_000})
    assert note.startswith("finished jobs not counted: the count was cancelled by the "
                           "server's statement_timeout")
    assert "9,000,000 rows" in note
    assert cli_status.finished_note({"counted": True, "budget": 2.0}) == ""
