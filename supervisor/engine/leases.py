"""The arithmetic of a global limit's slices: how much of a queue's limit one supervisor
may hold, given what the others hold and want. Pure functions, no I/O.

Every supervisor serving a limited queue keeps one lease row per queue: the slots
(running jobs) and the rate (starts per second) it holds, what it could use now, and an
expiry. A renewal, under a per-queue lock, computes the caller's new slice with
``running_slice`` and ``rate_slice``, which keep one invariant: the slices of the live
leases add up to at most the limit. A slice only grows into room the others left, so
shares move from one supervisor to another in two steps (the holder shrinks at its
renewal, the other grows at its own), never both at once.

Fairness: each supervisor's target is its water-filled share of the limit by what it
wants (``fair_shares``), so a supervisor that wants less than an equal share leaves the
rest to the others, and one that holds more than its share shrinks to it as its running
jobs finish: nobody starves the others for longer than a job and a renewal.
"""

from __future__ import annotations

from collections.abc import Mapping

from supervisor.db import LeaseRow as Lease

_EPS = 1e-9


def fair_shares(total: float, wants: Mapping[str, float]) -> dict[str, float]:
    """``total`` water-filled over ``wants``: everyone gets what they want if it fits,
    else the same level for all whose want is above it."""
    result = {name: 0.0 for name in wants}
    left = float(total)
    open_names = sorted((n for n, w in wants.items() if w > _EPS), key=lambda n: wants[n])
    while open_names and left > _EPS:
        level = left / len(open_names)
        smallest = open_names[0]
        if wants[smallest] - result[smallest] <= level + _EPS:
            give = wants[smallest] - result[smallest]
            result[smallest] += give
            left -= give
            open_names.pop(0)
            continue
        for n in open_names:
            result[n] += level
        break
    return result


def whole_shares(total: int, wants: Mapping[str, int]) -> dict[str, int]:
    """``fair_shares`` in whole slots: each rounded down, the slots left over handed out
    one by one in name order (an order every supervisor computes alike, so two of them
    never both count on the same spare slot), never beyond a want."""
    shares = {n: int(s + _EPS) for n, s in fair_shares(total, wants).items()}
    spare = total - sum(shares.values())
    names = sorted(wants)
    for name in names:
        if spare <= 0:
            break
        if shares[name] < wants[name]:
            shares[name] += 1
            spare -= 1
    return shares


def running_target(limit: int, me: str, want: int, others: Mapping[str, Lease]) -> int:
    """``me``'s fair share of ``limit`` running slots, in whole slots."""
    wants = {name: lease.want_slots for name, lease in others.items()}
    wants[me] = max(want, 0)
    return whole_shares(limit, wants)[me]


def running_slice(limit: int, me: str, want: int, held: int,
                  others: Mapping[str, Lease]) -> tuple[int, int]:
    """(slots to store, slots this supervisor may start up to) for ``me``.

    ``held`` is how many jobs of the queue it runs now: the stored slots never drop
    below it (those jobs run whatever we write), while the start allowance may, so a
    supervisor above its fair share stops starting and shrinks as its jobs end.
    """
    target = running_target(limit, me, want, others)
    room = limit - sum(lease.slots for lease in others.values())
    allowed = max(min(target, room), 0)
    return max(held, allowed), allowed


def rate_slice(limit: float, me: str, want: float, others: Mapping[str, Lease]) -> float:
    """Starts per second ``me`` may make: its fair share of ``limit``, within the rate
    the other live leases left free."""
    return max(min(rate_target(limit, me, want, others),
                   limit - sum(lease.rate for lease in others.values())), 0.0)


def rate_target(limit: float, me: str, want: float, others: Mapping[str, Lease]) -> float:
    """``me``'s fair share of the rate ``limit`` (what ``rate_slice`` grows to once the
    others have shrunk to theirs)."""
    wants = {name: lease.want_rate for name, lease in others.items()}
    wants[me] = max(want, 0.0)
    return fair_shares(limit, wants)[me]


# Half a token of slack over the whole queue, split like the rate. A bucket of exactly
# one token that is full while the loop wakes a millisecond late loses that millisecond
# of refill at every start: 3% of a 50/s rate was lost that way. Under half a token in
# all never adds a whole start to any one-second window (for a whole-number rate).
SLACK_TOKENS = 0.5


def burst_slice(burst: int, rate: float, limit: float) -> float:
    """The token bucket size for a slice of ``rate`` out of ``limit`` with a queue burst
    of ``burst``: the burst split in proportion to the rate, at least one token (a
    bucket must hold a whole token to start anything), plus its part of the slack."""
    if rate <= 0 or limit <= 0:
        return 1.0
    return max(1.0, burst * rate / limit) + SLACK_TOKENS * rate / limit
