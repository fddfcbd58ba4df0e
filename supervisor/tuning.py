"""The dispatch path's tuning table (issue 41): every rule that decides how many jobs a
queue claims, when, into which child's pipe, and when they are taken back, as one field
of one frozen record, each with its value, a one-line reason and the benchmark that
measured it (``scripts/bench/``). The longer story of each rule stays in the docstring of
the module that applies it; this table is where a reader finds the numbers.

``Tuning`` is handed to the depth, the planner, the fair-share book, the outbox, the run
times and the pool through their constructors (``RunConfig.tuning``, ``DEFAULT`` unless
a test says otherwise): nothing on the dispatch path reads a number of its own, and
``tests/test_tuning_table.py`` fails on a new inline one.

The depth a queue of ``t``-second jobs holds per child (prefetch "auto", claim latency
``L``), with ``long_job`` = 0.1 s, ``floor_from`` = 5 ms, ``claim_covers`` = 0.1 s:

- ``t`` < ``floor_from``: ``ceil(claim_round_trips * L / t) + 2`` (the job in hand and a
  spare), at most ``max_depth``; the pipe holds all of it, at most ``max_pipeline``;
- ``floor_from`` <= ``t`` < ``long_job``: at least ``ceil(claim_covers / t)`` as well;
- ``t`` >= ``long_job``: ``ceil(claim_round_trips * L / t) + 1`` claimed per child, a pipe
  of ``long_job_pipe`` (two) below ``long_pipe_until`` (1 s), of one from there on;
- a kind with tail runs: its pipe at most ``1 + tail_share * runs / tail runs`` (never
  below ``min_tail_pipe``).

``tests/test_depth_curve.py`` pins that curve as a table: a change to it shows in review.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any


def _rule(value: Any, reason: str, bench: str) -> Any:
    """A field of the table: its value, why it is that, and what measured it."""
    return field(default=value, metadata={"reason": reason, "bench": bench})


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the table, as ``Tuning.rules`` lists it."""

    name: str
    value: float
    reason: str
    bench: str


@dataclass(frozen=True)
class Tuning:
    """The dispatch path's numbers (see the module docstring)."""

    # -- the prefetch depth (engine/depth.py) ---------------------------------------
    max_depth: int = _rule(
        256, "jobs held per child at most; also bounds what a dying supervisor leaves "
        "leased", "scripts/bench/drain_ceiling.py")
    max_pipeline: int = _rule(
        64, "jobs in one child's pipe at most, the running one included",
        "scripts/bench/drain_ceiling.py")
    claim_round_trips: float = _rule(
        2.0, "a child holds this many claim round trips of its own work, so it never "
        "waits for the database between two jobs", "scripts/bench/efficiency_interleaved.py")
    short_job_spare: int = _rule(
        1, "one job more per child for jobs shorter than long_job: its next claim may be "
        "late", "scripts/bench/efficiency_interleaved.py")
    first_latency: float = _rule(
        0.005, "seconds assumed for a claim's round trip until one was measured",
        "scripts/bench/latency.py")
    latency_decay: float = _rule(
        0.05, "how fast the claim latency's high-water mark comes down per claim: a "
        "child starves on the slow claims, not the average one",
        "scripts/bench/efficiency_interleaved.py")
    shortest_run_time: float = _rule(
        1e-6, "seconds a run time measured as zero counts as in the depth's division",
        "scripts/bench/drain_ceiling.py")
    long_job: float = _rule(
        0.1, "seconds: jobs this long are claimed without a spare, no carry wait for the "
        "claim, and a pipe of two at most", "scripts/bench/efficiency_interleaved.py")
    long_job_pipe: int = _rule(
        2, "jobs in the pipe of a child running long jobs shorter than long_pipe_until, "
        "the running one included: the next one's START rides on the answer's write (a "
        "pipe of one: a second parent wake and a 1.0-1.1 ms idle gap a 200 ms job)",
        "scripts/bench/job_timeline.py")
    long_pipe_until: float = _rule(
        1.0, "seconds: jobs this long have a pipe of one, the gap is nothing to them and "
        "a job queued behind one would wait for it", "scripts/bench/job_timeline.py")
    floor_from: float = _rule(
        0.005, "seconds: jobs from this long up to long_job are claimed claim_covers of "
        "work per child at least", "scripts/bench/efficiency_interleaved.py")
    claim_covers: float = _rule(
        0.1, "seconds of work per child each claim of 5-100 ms jobs takes at least: "
        "fewer claims and commits per job", "scripts/bench/efficiency_interleaved.py")
    min_top_up_pipe: int = _rule(
        2, "a busy child's pipe is topped up only where its queue's pipe holds this many",
        "scripts/bench/efficiency_interleaved.py")

    # -- the loop's rhythm (arbiter.py) -------------------------------------------------
    settle_share: float = _rule(
        0.5, "while every child has jobs queued behind the one it runs, the loop waits "
        "this share of the time until the first would run dry before it hears them, so "
        "one turn serves several answers", "scripts/bench/many_children.py")
    settle_max: float = _rule(
        0.02, "seconds that wait lasts at most: the lag of a START's time, a cancel, a "
        "stop signal's drain", "scripts/bench/many_children.py")
    settle_min: float = _rule(
        0.001, "seconds: a shorter wait is not taken, it would save no turn",
        "scripts/bench/many_children.py")
    settle_answers: float = _rule(
        2.0, "answers the children are expected to send within the wait, at least: the "
        "wait is a wake of its own (100 ms jobs on -n 2: none, and one wake more a turn)",
        "scripts/bench/job_timeline.py")

    # -- run times (pool/runtimes.py) ------------------------------------------------
    run_window: int = _rule(
        200, "run times kept per kind: enough for a stable 95th percentile",
        "scripts/bench/heavy_tail.py")
    percentile: float = _rule(
        0.95, "the run time a kind is judged by (overrun, drain notices); the table's "
        "percentile_disc uses the same", "scripts/bench/heavy_tail.py")
    sort_every: int = _rule(
        20, "new samples between two sorts of a kind's window (a sort: ~10 us)",
        "scripts/bench/drain_ceiling.py")
    drain_min_samples: int = _rule(
        3, "completions here below which a drain asks the table for a kind's p95",
        "scripts/bench/stop_notice.py")
    min_overrun: float = _rule(
        0.05, "seconds into a job before which it never overruns: a recall costs a round "
        "trip to the child and back", "scripts/bench/heavy_tail.py")
    overrun_factor: float = _rule(
        2.0, "a head overruns at this multiple of its kind's p95: one run in twenty "
        "passes the p95 itself", "scripts/bench/heavy_tail.py")
    tail_window: int = _rule(
        1000, "runs per kind over which the share of tail runs is counted",
        "scripts/bench/heavy_tail.py")
    tail_factor: float = _rule(
        10.0, "a run this many times its kind's median (and >= min_overrun) is a tail run",
        "scripts/bench/heavy_tail.py")
    tail_share: float = _rule(
        0.005, "at most this share of a tailed kind's jobs should queue behind a tail run",
        "scripts/bench/heavy_tail.py")
    min_tail_pipe: int = _rule(
        2, "a tailed kind's pipe is never shorter: with one the child waits for the "
        "parent after every job", "scripts/bench/heavy_tail.py")
    smoothing: float = _rule(
        0.2, "weight of the newest sample in each queue's averaged run times",
        "scripts/bench/efficiency_interleaved.py")
    tail_clip: float = _rule(
        4.0, "a sample counts for at most this many times its queue's typical run time",
        "scripts/bench/heavy_tail.py")

    # -- the pool's recalls (pool/recalls.py) ----------------------------------------
    steal_min: float = _rule(
        0.01, "seconds: a lone queued job whose child should reach it this soon stays",
        "scripts/bench/efficiency_interleaved.py")
    rebalance_share: float = _rule(
        0.5, "an idle child takes this share (the last jobs) of the fullest pipe",
        "scripts/bench/fair_drain.py")
    newcomer_place: int = _rule(
        2, "a fair queue's newly arrived batch runs its first job at this place in a "
        "child's pipe: right after the job it runs", "scripts/bench/fair_batches.py")

    # -- the planner (engine/planner.py, engine/allotment.py) ------------------------
    claim_when_free: float = _rule(
        0.5, "a queue with jobs still waiting claims once this share of its window is "
        "free, so short jobs are claimed in batches", "scripts/bench/efficiency_interleaved.py")
    claim_hold: float = _rule(
        0.25, "seconds a free child waits for the claim of a queue owed children before "
        "it is lent to another", "scripts/bench/fair_drain.py")
    horizon_jobs: float = _rule(
        8.0, "how much a queue may be owed (or owe), in mean job lengths",
        "scripts/bench/fair_drain.py")
    min_horizon: float = _rule(
        1.0, "child-seconds a queue may be owed until job lengths have been seen",
        "scripts/bench/fair_drain.py")
    length_half_life: float = _rule(
        60.0, "seconds over which the mean job length is averaged",
        "scripts/bench/fair_drain.py")
    rank_steps: int = _rule(
        16, "balances are ranked in this many steps of the horizon, so a child is not "
        "swapped back and forth for a millisecond owed", "scripts/bench/fair_drain.py")

    # -- the outbox (engine/outbox.py) -----------------------------------------------
    write_batch: int = _rule(
        512, "this many waiting outcomes are written at once, unless only completions "
        "wait and a claim in flight will carry them",
        "scripts/bench/drain_ceiling.py")
    carry_limit: float = _rule(
        0.5, "seconds completions wait at most for a claim in flight to carry them",
        "scripts/bench/carry.py")
    claim_carry_wait: float = _rule(
        0.1, "seconds completions wait at most for a claim sure to come (short jobs, "
        "busy children)", "scripts/bench/efficiency_interleaved.py")
    claim_soon_share: float = _rule(
        0.75, "jobs of long_job or more with a pipe of two let their completions wait for "
        "the next claim when the busy children end one within this share of "
        "claim_carry_wait (-n 2: jobs up to 150 ms)", "scripts/bench/job_timeline.py")
    start_hold: float = _rule(
        0.5, "seconds a start waits unwritten: a job that ends sooner has it carried by "
        "its outcome", "scripts/bench/efficiency_interleaved.py")
    start_carry_age: float = _rule(
        0.25, "seconds old a start must be to ride on a claim (half the hold): 5-100 ms "
        "jobs never write one", "scripts/bench/efficiency_interleaved.py")
    write_retry_after: float = _rule(
        1.0, "seconds before writes that failed for a bad statement go again",
        "scripts/bench/drain_ceiling.py")
    exit_write_tries: int = _rule(
        3, "tries of the last write before exit when its statement fails (a lost "
        "deadlock is transient); what is left then waits out its lease",
        "scripts/bench/drain_ceiling.py")

    def rules(self) -> Iterator[Rule]:
        """Every field with its value, reason and benchmark, in the table's order."""
        for spec in fields(self):
            yield Rule(spec.name, getattr(self, spec.name), spec.metadata["reason"],
                       spec.metadata["bench"])


DEFAULT = Tuning()
