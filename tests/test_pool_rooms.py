"""``supervisor.pool.rooms.Rooms``: the child a queued job goes to, found once per
dispatch round, is the one a full scan of every child picks (the most room, ties to the
first), job after job, whatever the children hold; and a round's order is dropped when
rooms change outside it."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from supervisor.pool.rooms import Rooms


@dataclass
class Job:
    queue: str


@dataclass
class Child:
    """What ``Rooms`` reads of a child: its jobs, and its room at a depth (here: a
    limit of its own, like a job that wants a child to itself, and a stopped flag)."""

    jobs: list[Job] = field(default_factory=list)
    limit: int = 1_000
    stopped: bool = False

    def room(self, depth: int) -> int:
        if self.stopped:
            return 0
        return min(self.limit, depth) - len(self.jobs)


def full_scan(children: list[Child], depth: int, queue: str | None) -> Child | None:
    """The pool's scan before ``Rooms``: every child looked at for every job."""
    best, most = None, 0
    for child in children:
        if len(child.jobs) >= depth:
            continue
        room = child.room(depth)
        if room > most and (queue is None or (child.jobs and child.jobs[0].queue == queue)):
            best, most = child, room
    return best


def random_children(rng: random.Random, count: int) -> list[Child]:
    children = []
    for _ in range(count):
        queue = rng.choice("ab")
        children.append(Child([Job(queue) for _ in range(rng.randrange(0, 12))],
                              limit=rng.choice([1_000, 1_000, 1_000, 3, 1]),
                              stopped=rng.random() < 0.1))
    return children


@pytest.mark.parametrize("seed", range(40))
def test_a_round_places_each_job_where_a_full_scan_would(seed):
    rng = random.Random(seed)
    children = random_children(rng, rng.randrange(1, 70))
    rooms = Rooms()
    depth = rng.randrange(1, 16)
    queue = rng.choice([None, "a", "b"])
    rooms_seen = sum(max(0, c.room(depth)) for c in children
                     if queue is None or (c.jobs and c.jobs[0].queue == queue))
    placed = 0
    while True:
        expected = full_scan(children, depth, queue)
        chosen = rooms.roomiest(children, depth, queue)
        assert chosen is expected
        if chosen is None:
            break
        # A child runs one queue at a time: what it is given is of the queue it runs.
        chosen.jobs.append(Job(chosen.jobs[0].queue if chosen.jobs else queue or "a"))
        placed += 1
    assert placed == rooms_seen  # every room there was is used, none twice


def test_a_child_given_a_job_that_wants_it_to_itself_takes_no_more_that_round():
    children = [Child([Job("a")]), Child([Job("a")])]
    rooms = Rooms()
    first = rooms.roomiest(children, 4, None)
    assert first is children[0]
    first.jobs.append(Job("a"))
    first.limit = 2  # the job placed wants few behind it
    assert rooms.roomiest(children, 4, None) is children[1]


def test_a_new_round_sees_rooms_that_grew_between_rounds():
    children = [Child([Job("a")] * 4), Child([Job("a")] * 4)]
    rooms = Rooms()
    assert rooms.roomiest(children, 4, None) is None  # every pipe full
    children[1].jobs.pop()  # an answer read: its child has room again
    rooms.forget()
    assert rooms.roomiest(children, 4, None) is children[1]


def test_a_depth_or_queue_other_than_the_rounds_orders_the_children_again():
    children = [Child([Job("a")]), Child([Job("b")] * 2)]
    rooms = Rooms()
    assert rooms.roomiest(children, 4, "a") is children[0]
    assert rooms.roomiest(children, 4, "b") is children[1]
    assert rooms.roomiest(children, 2, None) is children[0]
