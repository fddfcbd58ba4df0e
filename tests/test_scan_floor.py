"""Where each maintenance round's rescue and prunes start their index scans (issue 40):
``ScanFloor`` on a fake clock, and the round's use of it with a recording store. The
statements' side (a floored pass reads none of the entries a held snapshot keeps) is
in ``test_maintenance.py``."""

from __future__ import annotations

from supervisor.db import FULL_SCAN, RESCUE_LIMIT, LeadRound, Rescued
from supervisor.engine.maintenance import (
    PRUNE_FLOOR_MARGIN,
    RESCUE_FLOOR_MARGIN,
    Maintenance,
    MaintenanceSettings,
    ScanFloor,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_pass_scans_everything_then_passes_start_below_the_last_cut():
    clock = Clock()
    floor = ScanFloor(below=30.0, full_every=300.0, clock=clock)
    assert floor.next() == FULL_SCAN
    floor.seen_all(5_000.0, FULL_SCAN)
    clock.now += 5
    assert floor.next() == 4_970.0
    floor.seen_all(5_005.0, 4_970.0)
    clock.now += 5
    assert floor.next() == 4_975.0


def test_a_full_scan_comes_back_every_full_every_seconds():
    clock = Clock()
    floor = ScanFloor(below=30.0, full_every=300.0, clock=clock)
    floor.seen_all(5_000.0, floor.next())
    for _ in range(59):  # rounds every 5 s: floored until 300 s have passed
        clock.now += 5
        used = floor.next()
        assert used != FULL_SCAN
        floor.seen_all(5_000.0 + clock.now - 100.0, used)
    clock.now += 5
    assert floor.next() == FULL_SCAN


class RecordingStore:
    """The store's side of a round: what each chore was asked, and canned answers."""

    def __init__(self, rounds: list[LeadRound], pruned: list[int]) -> None:
        self.rounds = rounds
        self.pruned = pruned  # rows each prune call deletes, in order (then 0)
        self.rescue_floors: list[float] = []
        self.prunes: list[tuple[bool, float]] = []

    def beat(self, heartbeat) -> None:
        pass

    def lead_chores(self, key, stale_after, rescue_floor):
        self.rescue_floors.append(rescue_floor)
        return self.rounds.pop(0)

    def expire(self, batch) -> int:
        return 0

    def prune(self, prune) -> int:
        self.prunes.append((prune.done, prune.floor))
        return self.pruned.pop(0) if self.pruned else 0

    def prune_batches(self, prune) -> int:
        return 0


def led(began_at: float, rescued: int = 0, open_: bool = True) -> LeadRound:
    return LeadRound([Rescued(i, "gone", False) for i in range(rescued)], began_at, open_)


def run(maintenance: Maintenance, store: RecordingStore) -> None:
    maintenance.run_round(store, children=2, busy=0, info={}, may_lead=True)  # type: ignore[arg-type]


def test_a_round_moves_the_rescue_floor_only_when_it_saw_every_expired_lease():
    clock = Clock()
    settings = MaintenanceSettings(retention=600.0, discarded_retention=900.0,
                                   prune_batch=10)
    maintenance = Maintenance(["q"], settings, clock=clock)
    store = RecordingStore([led(5_000.0, rescued=RESCUE_LIMIT), led(5_005.0),
                            led(5_100.0, open_=False), led(5_110.0)], [])
    for _ in range(4):
        run(maintenance, store)
        clock.now += 5
    run_floors = store.rescue_floors
    # A full batch: more may wait below; the server's restart: no rescue ran at all.
    margin = RESCUE_FLOOR_MARGIN
    assert run_floors == [FULL_SCAN, FULL_SCAN, 5_005.0 - margin, 5_005.0 - margin]
    assert maintenance.rescue_floor.next() == 5_110.0 - margin


def pruning(budget: float) -> Maintenance:
    """A leader whose rounds prune 10 rows a batch, completed jobs after 600 s and
    discarded ones after 900 s, within ``budget`` seconds."""
    settings = MaintenanceSettings(retention=600.0, discarded_retention=900.0,
                                   prune_batch=10, prune_budget=budget)
    return Maintenance(["q"], settings, clock=Clock())


def test_each_kind_of_end_is_pruned_from_its_own_floor_once_a_pass_drained_it():
    maintenance = pruning(budget=60.0)
    # Round 1: two full batches of done jobs then a short one; discarded ones: none.
    store = RecordingStore([led(5_000.0), led(5_005.0)], [10, 10, 3, 0])
    run(maintenance, store)
    assert store.prunes == [(True, FULL_SCAN)] * 3 + [(False, FULL_SCAN)]
    store.prunes.clear()
    run(maintenance, store)
    assert store.prunes == [(True, 5_000.0 - 600.0 - PRUNE_FLOOR_MARGIN),
                            (False, 5_000.0 - 900.0 - PRUNE_FLOOR_MARGIN)]


def test_a_prune_cut_short_by_its_budget_keeps_its_floor():
    maintenance = pruning(budget=0.0)
    store = RecordingStore([led(5_000.0), led(5_005.0)], [10, 0, 10, 0])
    run(maintenance, store)  # a full batch of done jobs, the budget spent: not drained
    run(maintenance, store)
    assert store.prunes[2] == (True, FULL_SCAN)


def test_a_held_horizon_spaces_the_full_scans_by_its_age_until_it_lets_go():
    clock = Clock()
    floor = ScanFloor(below=2.0, full_every=300.0, clock=clock)
    floor.seen_all(5_000.0, floor.next())  # the first, full
    floor.horizon_held(200.0)  # a look: held 200 s; the next full scan 800 s after
    clock.now += 799
    assert floor.next() != FULL_SCAN
    clock.now += 1
    assert floor.next() == FULL_SCAN
    floor.horizon_held(0.0)  # let go: every 300 s again, the first 300 s after it let
    assert floor.next() != FULL_SCAN  # go (its dead versions stay until a vacuum)
    clock.now += 299
    assert floor.next() != FULL_SCAN
    clock.now += 1
    assert floor.next() == FULL_SCAN
    floor.seen_all(5_900.0, FULL_SCAN)
    floor.horizon_held(0.0)  # a look that finds it still not held changes nothing
    clock.now += 299
    assert floor.next() != FULL_SCAN
    clock.now += 1
    assert floor.next() == FULL_SCAN
