"""Global limits with three real supervisors on one database, judged from the handlers'
own start and end records (``limits_handlers``): max-running, max-rate, per-key
exclusivity, a limit changed while they run, and a SIGKILLed supervisor's slice coming
back within a lease."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest
from click.testing import CliRunner
from e2e import Supervisor, read_log, state_counts, wait_all, wait_until

from shared.enqueue import enqueue_many
from supervisor.cli.main import main

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # several supervisors: CI lane

APP = "limits_handlers"


def limit(dsn: str, *args: str) -> None:
    result = CliRunner().invoke(main, ["queues", "limit", "limited", *args, "--dsn", dsn])
    assert result.exit_code == 0, result.output


def start(dsn: str, log, count: int = 3, *args: str) -> list[Supervisor]:
    return [Supervisor(dsn, "-n", "3", *args, log_path=log, app=APP) for _ in range(count)]


def burst_all(dsn: str, log, count: int = 3, *args: str) -> None:
    wait_all(start(dsn, log, count, "--burst", *args))


def peak(records: list[dict], key=lambda r: None, after: float = 0.0,
         before: float = float("inf")) -> Counter:
    """The most jobs running at once (per ``key`` of a record) between two times."""
    events = sorted((r["t"], 1 if r["event"] == "start" else -1, key(r)) for r in records)
    level: Counter = Counter()
    best: Counter = Counter()
    for t, step, group in events:
        level[group] += step
        if after <= t <= before:
            best[group] = max(best[group], level[group])
    return best


def reached_at(records: list[dict], level: int) -> float:
    """When ``level`` jobs first ran at once."""
    running = 0
    for t, step in sorted((r["t"], 1 if r["event"] == "start" else -1) for r in records):
        running += step
        if running >= level:
            return t
    return float("inf")


def busiest_second(starts: list[float]) -> int:
    """The most starts within any one-second window (each window opens at a start)."""
    starts = sorted(starts)
    best, j = 0, 0
    for i, t in enumerate(starts):
        while starts[j] < t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


def test_max_running_holds_across_three_supervisors(dsn, tmp_path):
    log = tmp_path / "runs.log"
    limit(dsn, "--max-running", "4")
    enqueue_many("lim_work", [{"seconds": 0.15}] * 60, queue="limited", dsn=dsn)
    burst_all(dsn, log)  # 9 children in all
    records = read_log(log)
    assert len(records) == 120
    assert peak(records)[None] == 4  # reached, never passed
    assert len({r["pid"] for r in records}) > 3  # more than one supervisor's children


def test_max_running_holds_in_a_supervisor_serving_several_queues(dsn, tmp_path):
    # With more than one queue served, jobs go to children by fair share; the limited
    # queue's starts must still stop at its slice.
    log = tmp_path / "runs.log"
    limit(dsn, "--max-running", "1")
    # Short jobs: the auto depth then claims several per slot.
    enqueue_many("lim_work", [{"seconds": 0.005}] * 200, queue="limited", dsn=dsn)
    enqueue_many("lim_other", [{"seconds": 0.01}], queue="other", dsn=dsn)
    burst_all(dsn, log, 1)
    records = read_log(log)
    assert len(records) == 402
    by_queue = peak(records, key=lambda r: r["queue"])
    assert by_queue["limited"] == 1, by_queue


def test_max_rate_holds_across_three_supervisors(dsn, tmp_path):
    log = tmp_path / "runs.log"
    limit(dsn, "--max-rate", "10", "--burst", "3")
    enqueue_many("lim_work", [{}] * 60, queue="limited", dsn=dsn)
    burst_all(dsn, log)
    starts = [r["t"] for r in read_log(log) if r["event"] == "start"]
    assert len(starts) == 60
    # Slices add up to 10/s and their buckets to the burst of 3 (one token each).
    assert busiest_second(starts) <= 10 + 3
    rate = (len(starts) - 1) / (max(starts) - min(starts))
    assert 8.0 <= rate <= 10.5, rate


def test_per_key_limit_keeps_each_key_exclusive_while_keys_run_side_by_side(dsn, tmp_path):
    log = tmp_path / "runs.log"
    limit(dsn, "--per-key-max-running", "1")
    keys = ["a", "b", "c", "d"] * 8
    enqueue_many("lim_work", [{"seconds": 0.1, "key": k} for k in keys], queue="limited",
                 concurrency_keys=keys, dsn=dsn)
    burst_all(dsn, log)
    records = read_log(log)
    assert len(records) == 64
    per_key = peak(records, key=lambda r: r["key"])
    assert per_key == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert peak(records)[None] >= 3  # other keys ran at the same time


def test_a_limit_changed_while_supervisors_run_takes_effect_within_a_second(dsn, tmp_path):
    """In poll-only mode (``--no-listen``, as behind PgBouncer): limits are polled."""
    log = tmp_path / "runs.log"
    limit(dsn, "--max-running", "1")
    enqueue_many("lim_work", [{"seconds": 0.2}] * 200, queue="limited", dsn=dsn)
    sups = start(dsn, log, 3, "--no-listen")
    try:
        wait_until(lambda: len(read_log(log)) >= 12, timeout=30, what="jobs under limit 1")
        assert peak(read_log(log))[None] == 1
        limit(dsn, "--max-running", "5")
        raised = time.time()
        wait_until(lambda: peak(read_log(log), after=raised)[None] >= 5, timeout=10,
                   what="5 running at once")
        assert reached_at(read_log(log), 5) - raised < 2.0
        limit(dsn, "--max-running", "2")
        lowered = time.time()
        settle = lowered + 1.5  # a renewal, and the jobs started before it end (0.2 s)
        wait_until(lambda: any(r["t"] > settle + 2 for r in read_log(log)), timeout=15,
                   what="two seconds under the new limit")
        assert peak(read_log(log), after=settle)[None] <= 2
        for sup in sups:
            sup.signal(signal.SIGTERM)
        for sup in sups:
            assert sup.wait(30) == 0, sup.err
    finally:
        for sup in sups:
            sup.stop()
    assert peak(read_log(log))[None] <= 5


def test_a_sigkilled_supervisors_slice_comes_back_within_a_lease(dsn, tmp_path):
    log = tmp_path / "runs.log"
    limit(dsn, "--max-running", "2")
    ttl = 3.0
    enqueue_many("lim_work", [{"seconds": 60}] * 2, queue="limited", dsn=dsn)
    first = Supervisor(dsn, "-n", "2", "--lease-ttl", str(ttl), log_path=log, app=APP)
    others = []
    try:
        wait_until(lambda: len(read_log(log)) == 2, timeout=30, what="two long jobs")
        enqueue_many("lim_work", [{"seconds": 0.05}] * 20, queue="limited", dsn=dsn)
        others = start(dsn, log, 2, "--lease-ttl", str(ttl))
        wait_until(lambda: all("global limits now" in s.err for s in others), timeout=30,
                   what="the others to read the limit")
        assert len(read_log(log)) == 2  # the first holds both slots
        first.signal(signal.SIGKILL)
        killed = time.time()
        first.wait(10)
        wait_until(lambda: any(r["t"] > killed for r in read_log(log)), timeout=ttl + 10,
                   what="a start after the kill")
        back = min(r["t"] for r in read_log(log) if r["t"] > killed)
        # The slice is free once its lease ran out; a renewal (0.5 s) later it is taken.
        assert back - killed <= ttl + 1.5, back - killed
        wait_until(lambda: state_counts(dsn).get("completed", 0) == 20, timeout=60,
                   what="the short jobs")
        short = [r for r in read_log(log) if r["t"] > killed]
        assert peak(short)[None] <= 2
    finally:
        first.stop()
        for sup in others:
            sup.stop()


def test_a_kill_storm_never_lets_more_than_max_running_run(dsn, tmp_path):
    """Supervisors SIGKILLed and replaced while they run a limited queue: a killed one's
    slice stays taken until its lease runs out, so its replacement (a new owner) cannot
    add to it. Killed children leave no end record: their job counts as running until it
    would have ended (an upper bound of when it stopped)."""
    log = tmp_path / "runs.log"
    limit(dsn, "--max-running", "3")
    seconds = 0.3
    enqueue_many("lim_work", [{"seconds": seconds}] * 150, queue="limited", dsn=dsn)
    args = ("--lease-ttl", "2")
    sups = start(dsn, log, 3, *args)
    try:
        for cycle in range(4):
            wait_until(lambda n=cycle: len(read_log(log)) >= 10 * (n + 1), timeout=30,
                       what="jobs between kills")
            victim = sups.pop(0)
            victim.signal(signal.SIGKILL)
            victim.wait(10)
            sups.append(Supervisor(dsn, "-n", "3", *args, log_path=log, app=APP))
        wait_until(lambda: len(read_log(log)) >= 100, timeout=60, what="more jobs")
    finally:
        for sup in sups:
            sup.stop()
    records = read_log(log)
    ended = {(r["id"], r["pid"]) for r in records if r["event"] == "end"}  # one attempt
    cut = [dict(r, event="end", t=r["t"] + seconds + 0.05) for r in records
           if r["event"] == "start" and (r["id"], r["pid"]) not in ended]
    assert cut  # the kills did cut jobs short
    assert peak(records + cut)[None] <= 3
