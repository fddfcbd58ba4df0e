"""Issue 48: at start, a few children per CPU are forked before the parent connects, and the
others only once the first job is in a child's pipe (or the first claim found nothing,
or the hold's time is up), then a few per recount of the pool, the loop turning at once
for the next ones. Against the pool's fakes: no process is forked here."""

from __future__ import annotations

import pool_handlers  # noqa: F401  (registers the pool_* kinds the parent looks up)
import pytest
from pool_fakes import Harness, exited

from shared import wire
from shared.exitcodes import CHILD_IMPORT_ERROR
from shared.jobs import ClaimedJob
from supervisor.pool import PoolHalted
from supervisor.pool.forkwaves import FORKS_PER_RECOUNT, HOLD_LIMIT, ForkWaves, first_wave

pytestmark = pytest.mark.timeout(10)


def job(job_id: int) -> ClaimedJob:
    return ClaimedJob(job_id, "pool_noop", "default", 1, 5, 0, None, "{}")


def waves(size: int, cpus: int) -> tuple[Harness, ForkWaves]:
    h = Harness(size=size)
    forks = ForkWaves(h.pool, cpus)
    forks.start(h.clock.now)
    return h, forks


def recount(h: Harness) -> None:
    """One turn of the loop as the pool sees it: reap, then tick."""
    h.pool.reap()
    h.pool.tick()


def test_the_first_wave_is_a_few_children_per_cpu_never_more_than_asked_for():
    assert [first_wave(n, 2) for n in (1, 2, 16, 64)] == [1, 2, 8, 8]
    assert first_wave(8, 16) == 8 and first_wave(3, 0) == 1


WAVE = first_wave(16, 1)  # the first wave on one CPU


def test_only_the_first_wave_is_forked_until_the_first_job_is_placed():
    h, forks = waves(size=16, cpus=1)
    assert len(h.pids()) == WAVE < 16 and h.pool.size() == 16
    h.ready()
    for _ in range(5):  # the claim is out: turns fork nothing, nor wake the loop for it
        recount(h)
        forks.after_tick(h.clock.now, placed=False, claiming=True, waiting=False)
    assert len(h.pids()) == WAVE
    assert h.pool.next_deadline() is None  # ready and idle: nothing makes the loop turn
    assert h.pool.dispatch(job(1))
    forks.after_tick(h.clock.now, placed=h.pool.busy_count() > 0, claiming=False,
                     waiting=True)
    assert forks.next_deadline() == h.clock.now  # the next turn is due at once
    recount(h)
    assert len(h.pids()) == WAVE + 2 * FORKS_PER_RECOUNT  # reap and tick: two recounts
    assert h.pool.next_deadline() == h.clock.now  # and so is the one after it
    while len(h.pids()) < 16:
        recount(h)
        forks.after_tick(h.clock.now, placed=True, claiming=False, waiting=False)
    assert forks.next_deadline() is None
    assert h.pool.alive() == 16 and sorted(c.worker_no for c in h.pool._children.values()) \
        == list(range(1, 17))
    h.ready()
    assert h.pool.idle_count() == 15 and h.pool.busy_count() == 1


def test_jobs_claimed_for_children_still_to_come_hold_the_rest_until_one_is_placed():
    h, forks = waves(size=16, cpus=1)
    forks.after_tick(h.clock.now, placed=False, claiming=False, waiting=True)
    recount(h)
    assert len(h.pids()) == WAVE  # the first wave boots: the first job goes to one of them


@pytest.mark.parametrize("placed,claiming,waiting,later", [
    (False, False, False, 0.0),  # the first claim found nothing: no job to wait for
    (False, True, False, HOLD_LIMIT),  # a claim never answered: not held for long
    (False, False, True, HOLD_LIMIT),  # a first wave that does not boot: neither
])
def test_the_rest_are_forked_without_a_first_job_when_there_is_none_to_wait_for(
        placed, claiming, waiting, later):
    size = WAVE + 2 * FORKS_PER_RECOUNT
    h, forks = waves(size=size, cpus=1)
    assert forks.next_deadline() == h.clock.now + HOLD_LIMIT
    h.clock.now += later
    forks.after_tick(h.clock.now, placed=placed, claiming=claiming, waiting=waiting)
    for _ in range(2):
        recount(h)
    assert len(h.pids()) == size


def test_a_drain_during_the_hold_forks_nothing_more():
    h, forks = waves(size=16, cpus=1)
    h.pool.stop()
    forks.after_tick(h.clock.now, placed=False, claiming=False, waiting=False)
    for _ in range(4):
        recount(h)
    assert len(h.pids()) == WAVE


def test_a_pool_without_waves_forks_every_child_at_once():
    h = Harness(size=16)
    h.pool.start()
    assert len(h.pids()) == 16


def test_children_that_cannot_boot_still_halt_the_pool_as_a_crash_loop():
    h = Harness(size=16, crash_loop_limit=3)
    forks = ForkWaves(h.pool, 2)
    forks.start(h.clock.now)
    with pytest.raises(PoolHalted, match="No module named 'nowhere'"):
        for _ in range(20):
            for pid in h.pids():
                h.says(pid, wire.BootError(
                    "import", "ModuleNotFoundError: No module named 'nowhere'").encode())
                h.exits(pid, exited(CHILD_IMPORT_ERROR))
            h.clock.now += 0.5  # no job is ever placed: the hold ends by its time
            h.pool.tick()
            forks.after_tick(h.clock.now, placed=False, claiming=True, waiting=True)
    assert "crash loop" in h.pool.halted
