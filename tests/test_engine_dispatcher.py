"""``engine.dispatcher.Dispatcher`` over fakes: one queue fills the idle children, two
queues share them, a queue owed children gets the pipes of one over its share freed,
and when every child runs an overrunning job what waits here goes back."""

from __future__ import annotations

from engine_fakes import FakePool, make_engine

from shared.jobs import ClaimedJob


def job(job_id: int, queue: str = "default") -> ClaimedJob:
    return ClaimedJob(job_id, "k", queue, 1, 5, 0, None, "{}")


class FreeingPool(FakePool):
    """Records what the dispatcher asks children's pipes to give back."""

    def __init__(self, size: int = 2) -> None:
        super().__init__(size)
        self.freed: list[tuple[set[str], int]] = []

    def free_for(self, over, wanted: int) -> int:
        self.freed.append((set(over), wanted))
        return 0


def test_one_queue_fills_the_idle_children_and_keeps_the_rest_waiting():
    engine, _db, _store, pool, _clock = make_engine(children=2)
    engine.ledger.add_claimed([job(1), job(2), job(3)])
    engine.dispatcher.dispatch(pool)
    assert sorted(pool.jobs) == [1, 2]
    assert [j.id for j in engine.ledger.waiting_jobs()] == [3]


def test_two_queues_with_work_share_the_children():
    engine, _db, _store, pool, _clock = make_engine(children=2, queues=("a", "b"))
    engine.ledger.add_claimed([job(1, "a"), job(2, "a"), job(3, "b"), job(4, "b")])
    engine.dispatcher.dispatch(pool)
    assert sorted(j.queue for j in pool.jobs.values()) == ["a", "b"]


def test_a_queue_owed_children_has_the_pipes_of_the_queue_over_its_share_freed():
    engine, _db, _store, _pool, _clock = make_engine(children=2, queues=("a", "b"))
    pool = FreeingPool(2)
    pool.dispatch(job(1, "a"))
    pool.dispatch(job(2, "a"))
    engine.ledger.add_claimed([job(3, "b")])
    engine.dispatcher.dispatch(pool)
    [(over, wanted)] = pool.freed
    assert over == {"a"} and wanted >= 1
    assert [j.id for j in engine.ledger.waiting_jobs()] == [3]


def test_no_pipe_is_freed_while_a_child_is_idle():
    engine, _db, _store, _pool, _clock = make_engine(children=2, queues=("a", "b"))
    pool = FreeingPool(2)
    pool.dispatch(job(1, "a"))
    engine.dispatcher._free_children_owed(pool, {"a": 1, "b": 1}, {"a": 1})
    assert not pool.freed


def test_every_child_overrunning_sends_what_waits_back_to_the_table():
    engine, _db, _store, pool, clock = make_engine(children=2)
    engine.ledger.add_claimed([job(1), job(2), job(3)])
    engine.dispatcher.dispatch(pool)
    pool.stuck = 1
    engine.dispatcher.all_stuck(clock.now, pool)
    assert [j.id for j in engine.ledger.waiting_jobs()] == [3]  # one child is not stuck
    pool.stuck = 2
    engine.dispatcher.all_stuck(clock.now, pool)
    assert not engine.ledger.waiting_jobs()
    assert [j.id for j in engine.outbox.pending.releases] == [3]


def test_a_queue_with_no_claim_out_and_no_news_of_work_has_nothing_to_claim():
    engine, _db, _store, _pool, _clock = make_engine()
    planner = engine.planner
    planner.wake(["default"])
    assert not engine.dispatcher.nothing_to_claim("default")
    planner.demand.discard("default")
    assert engine.dispatcher.nothing_to_claim("default")
