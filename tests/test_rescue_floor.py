"""Where each maintenance round's rescue starts its scan of the lease index (issue 40):
``RescueFloor`` alone, on a fake clock. The statement's side (a floored rescue reads
none of the entries a held snapshot keeps) is in ``test_maintenance.py``."""

from __future__ import annotations

from supervisor.db import FULL_SCAN, RESCUE_LIMIT, LeadRound, Rescued
from supervisor.engine.maintenance import RescueFloor


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def led(began_at: float, rescued: int = 0, open_: bool = True) -> LeadRound:
    return LeadRound([Rescued(i, "gone", False) for i in range(rescued)], began_at, open_)


def test_the_first_round_scans_everything_then_rounds_start_a_ttl_below_the_last():
    clock = Clock()
    floor = RescueFloor(ttl=30.0, full_every=300.0, clock=clock)
    assert floor.next() == FULL_SCAN
    floor.after(led(5_000.0, rescued=3), FULL_SCAN)
    clock.now += 5
    assert floor.next() == 4_970.0
    floor.after(led(5_005.0), 4_970.0)
    clock.now += 5
    assert floor.next() == 4_975.0


def test_a_full_scan_comes_back_every_full_every_seconds():
    clock = Clock()
    floor = RescueFloor(ttl=30.0, full_every=300.0, clock=clock)
    floor.after(led(5_000.0), floor.next())
    for _ in range(59):  # rounds every 5 s: floored until 300 s have passed
        clock.now += 5
        used = floor.next()
        assert used != FULL_SCAN
        floor.after(led(5_000.0 + clock.now - 100.0), used)
    clock.now += 5
    assert floor.next() == FULL_SCAN


def test_a_round_that_could_not_see_every_expired_lease_moves_nothing():
    clock = Clock()
    floor = RescueFloor(ttl=30.0, clock=clock)
    # A full batch: more expired leases may wait below the next floor.
    floor.after(led(5_000.0, rescued=RESCUE_LIMIT), FULL_SCAN)
    assert floor.next() == FULL_SCAN
    floor.after(led(5_005.0), FULL_SCAN)
    # The server just restarted: no rescue ran, so nothing was looked at.
    floor.after(led(5_100.0, open_=False), floor.next())
    assert floor.next() == 4_975.0
    floor.after(led(5_110.0, rescued=RESCUE_LIMIT), 4_975.0)
    assert floor.next() == 4_975.0
