"""A simulated supervisor for the scheduling tests: the real ``Scheduler`` driven by a
fake clock, children that run jobs of given lengths, and a database that always holds
more work. It follows the arbiter's turn: outcomes, dispatch, one claim in flight at a
time (answered after ``rtt`` seconds), dispatch again when the claim is answered.

With ``batches`` a queue's jobs belong to batches that arrive at given times, and each
claim's answer is made of them as the claim statement would make it: round-robin (whole
rounds, the last round's batches drawn at random) when the queue is ``fair = "batch"``,
else all of the oldest batch (the plain claim's order; the database always has more of
every batch). Within one answer the older batches' jobs come first, as
``supervisor.db.claim.decode`` orders a claim's rows."""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter, deque
from collections.abc import Callable

from supervisor.config import RunConfig
from supervisor.engine.planner import Scheduler
from supervisor.queue_policy import QueuePolicy


class Clock:
    """A clock the simulation moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Simulation:
    """``children`` children serving ``policies``; ``length(queue, n)`` is the run time of
    the n-th job of ``queue``."""

    def __init__(self, policies: dict[str, dict], children: int,
                 length: Callable[[str, int], float], rtt: float = 0.002,
                 arrives: dict[str, float] | None = None,
                 batches: dict[str, dict[str, float]] | None = None, seed: int = 0) -> None:
        self.clock = Clock()
        config = RunConfig(children=children, queue_policies={
            name: QueuePolicy(name=name, **settings) for name, settings in policies.items()})
        self.queues = sorted(policies)
        self.scheduler = Scheduler(config, self.queues, 0.0, clock=self.clock)
        arrives = arrives or {}
        self.scheduler.observed({q for q in self.queues if arrives.get(q, 0.0) <= 0.0})
        self.children = children
        self.length = length
        self.rtt = rtt
        self.idle = children
        self.waiting: dict[str, deque[int]] = {q: deque() for q in self.queues}
        self.running: Counter[str] = Counter()
        self.in_flight: tuple[str, int] | None = None
        self.last_turn: dict[str, int] = {}
        self.order = itertools.count()
        self.events: list[tuple[float, int, str, str]] = []
        self.seq = itertools.count()
        self.started: Counter[str] = Counter()
        self.busy: Counter[str] = Counter()  # child-seconds inside the measured window
        self.window = (0.0, float("inf"))
        self.max_running: Counter[str] = Counter()
        self.starts: dict[str, list[float]] = {q: [] for q in self.queues}
        for queue, at in arrives.items():
            if at > 0:
                heapq.heappush(self.events, (at, next(self.seq), "arrive", queue))
        self.fair = {q for q, settings in policies.items() if settings.get("fair") == "batch"}
        self.arrived: dict[str, list[str]] = {q: [] for q in (batches or {})}
        self.batch_starts: dict[str, list[float]] = {}
        self.rng = random.Random(seed)
        for queue, members in (batches or {}).items():
            for name, at in members.items():
                self.batch_starts[name] = []
                heapq.heappush(self.events, (at, next(self.seq), "batch:" + name, queue))

    def run(self, until: float, measure_from: float = 0.0) -> dict[str, float]:
        """Simulate until ``until``; returns each queue's part of the child-seconds used
        from ``measure_from`` on."""
        self.window = (measure_from, until)
        self.turn()
        while self.events and self.events[0][0] <= until:
            t, _, kind, queue = heapq.heappop(self.events)
            self.clock.now = t
            if kind == "done":
                self.running[queue] -= 1
                self.idle += 1
                self.turn()
            elif kind == "arrive":  # work appears and NOTIFY names the queue
                self.scheduler.wake([queue])
                self.turn()
            elif kind.startswith("batch:"):  # a batch is enqueued into the queue
                self.arrived[queue].append(kind.removeprefix("batch:"))
                self.scheduler.wake([queue])
                self.turn()
            else:
                self.answered(queue)
        total = sum(self.busy.values())
        return {q: self.busy[q] / total for q in self.queues}

    def turn(self) -> None:
        self.dispatch()
        self.claim()
        self.dispatch()

    def outstanding(self) -> dict[str, int]:
        held = Counter(self.running)
        for q, d in self.waiting.items():
            held[q] += len(d)
        return dict(held)

    def claim(self) -> None:
        if self.in_flight is not None:
            return
        waiting = {q: len(d) for q, d in self.waiting.items() if d}
        plans = self.scheduler.plan_claims(self.clock.now, self.children, self.outstanding(),
                                           waiting)
        if not plans:
            return
        plans.sort(key=lambda plan: self.last_turn.get(plan[0], -1))
        queue, wanted = plans[0]
        for other, tokens in plans[1:]:
            self.scheduler.unplanned(other, tokens)
        self.last_turn[queue] = next(self.order)
        self.in_flight = (queue, wanted)
        heapq.heappush(self.events, (self.clock.now + self.rtt, next(self.seq), "claim", queue))

    def answered(self, queue: str) -> None:
        _, wanted = self.in_flight
        self.in_flight = None
        self.scheduler.claimed(queue, wanted, wanted)  # the database always has more
        if queue in self.arrived:
            self.waiting[queue].extend(self.batch_jobs(queue, wanted))
        else:
            self.waiting[queue].extend(range(wanted))
        self.turn()

    def batch_jobs(self, queue: str, wanted: int) -> list:
        """The batches of a claim's ``wanted`` jobs, in the order the claim returns them."""
        groups = self.arrived[queue]
        if not groups:
            return list(range(wanted))
        if queue not in self.fair:
            return [groups[0]] * wanted
        rounds, rest = divmod(wanted, len(groups))
        taken = [g for _ in range(rounds) for g in groups] + self.rng.sample(groups, rest)
        return sorted(taken, key=groups.index)

    def dispatch(self) -> None:
        while self.idle > 0:
            waiting = {q: len(d) for q, d in self.waiting.items() if d}
            if not waiting:
                return
            queue = self.scheduler.next_queue(self.children, waiting, self.running)
            if queue is None:
                return
            job = self.waiting[queue].popleft()
            self.start(queue)
            if isinstance(job, str):
                self.batch_starts[job].append(self.clock.now)

    def start(self, queue: str) -> None:
        now = self.clock.now
        length = self.length(queue, self.started[queue])
        self.started[queue] += 1
        self.starts[queue].append(now)
        self.idle -= 1
        self.running[queue] += 1
        self.max_running[queue] = max(self.max_running[queue], self.running[queue])
        lo, hi = self.window
        self.busy[queue] += max(0.0, min(now + length, hi) - max(now, lo))
        heapq.heappush(self.events, (now + length, next(self.seq), "done", queue))
