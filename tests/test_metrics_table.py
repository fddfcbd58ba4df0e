"""Metrics equal the table (issue 45): after a run that mixes completions, exceptions,
timeouts, crashes, poison and a tripped breaker, what ``/metrics`` counts is what
``supervisor.jobs`` says, counter by counter (definitions: docs/operations.md, "Counters
and the table"). And the crash rule: timeouts are no crash unless a kind says so."""

from __future__ import annotations

import re
import socket
import urllib.request
from collections import Counter

import psycopg
import pytest
from e2e import Supervisor, job_row, wait_until

from shared.enqueue import enqueue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

_SAMPLE = re.compile(r'^(supervisor_[a-z_]+)\{([^}]*)\} (\S+)$')
_LABEL = re.compile(r'(\w+)="([^"]*)"')
MIX = {"dis_ok": 4, "dis_raise": 2, "dis_slow": 2, "dis_slow_counted": 1, "dis_segv": 3,
       "dis_abort": 1}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, Counter]:
    """Each labelled family as a Counter keyed by its labels (a tuple of label values,
    the ``le`` of histogram buckets left out of the families read here)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    found: dict[str, Counter] = {}
    for line in text.decode().splitlines():
        match = _SAMPLE.match(line)
        if match:
            name, labels, value = match.groups()
            key = tuple(v for _, v in _LABEL.findall(labels))
            found.setdefault(name, Counter())[key] += int(float(value))
    return found


def table(dsn: str) -> dict[str, Counter]:
    """The same counts from supervisor.jobs, keyed as the metrics are."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT queue, kind, state, attempt, errors "
                            "FROM supervisor.jobs").fetchall()
    counts: dict[str, Counter] = {name: Counter() for name in (
        "started", "completed", "failed", "discarded", "retried")}
    for queue, kind, state, attempt, errors in rows:
        counts["started"][(queue, kind)] += attempt
        entries = [e for e in errors if e["kind"] != "poison"]
        for entry in entries:
            counts["failed"][(queue, kind, entry["kind"])] += 1
        if state == "completed":
            counts["completed"][(queue, kind)] += 1
        if state == "discarded":
            counts["discarded"][(queue, kind, errors[-1]["kind"])] += 1
        # Every failed attempt went back for another, but a discarded job's last.
        counts["retried"][(queue, kind)] += len(entries) - (state == "discarded")
    return {name: +counter for name, counter in counts.items()}


def _final(dsn: str, ids: list[int]) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE id = ANY(%s) "
                            "AND state IN ('completed', 'discarded')", (ids,)).fetchone()[0] \
            == len(ids)


def test_after_a_mix_the_metrics_equal_the_table(dsn, tmp_path):
    config = tmp_path / "supervisor.toml"
    config.write_text("breaker_failures = 3\nbreaker_window = 120\nbreaker_cooldown = 3\n")
    port = free_port()
    ids = [enqueue(kind, {}, dsn=dsn) for kind, n in MIX.items() for _ in range(n)]
    sup = Supervisor(dsn, "-n", "2", "--config", str(config), "--poll-interval", "0.2",
                     "--metrics-port", str(port), log_path=tmp_path / "run.log",
                     app="discard_handlers")
    try:
        wait_until(lambda: _final(dsn, ids), timeout=180, what="every job to end")
        sup.wait_for_log("kind dis_segv is paused", timeout=30)
        metrics = scrape(port)
    finally:
        sup.stop()
    expected = table(dsn)
    seen = {
        "started": +metrics["supervisor_jobs_started_total"],
        "completed": +metrics["supervisor_jobs_completed_total"],
        "failed": +metrics["supervisor_jobs_failed_total"],
        "discarded": +metrics["supervisor_jobs_discarded_total"],
        "retried": +metrics["supervisor_jobs_retried_total"],
    }
    assert seen == expected
    # The mix had what it was meant to: poison (twice a crash, once a counted timeout),
    # timeouts used up as ordinary failures, and the breaker tripped.
    discarded = {key[1:]: n for key, n in expected["discarded"].items()}
    assert discarded[("dis_segv", "poison")] == 3
    assert discarded[("dis_slow_counted", "poison")] == 1
    assert discarded[("dis_slow", "timeout")] == 2
    assert discarded[("dis_abort", "crashed")] == 1
    assert metrics["supervisor_kind_breaker_trips_total"][("dis_segv",)] >= 1
    # A claim is a lease taken: each became an attempt or went back unstarted.
    claimed = sum(metrics["supervisor_jobs_claimed_total"].values())
    released = sum(metrics["supervisor_jobs_released_total"].values())
    assert claimed == sum(expected["started"].values()) + released
    # Every started attempt's run time was observed once.
    durations = +Counter({key: n for key, n in
                          metrics["supervisor_job_duration_seconds_count"].items()})
    assert durations == expected["started"]


def test_timeouts_are_no_crash_unless_the_kind_says_so(dsn, tmp_path):
    config = tmp_path / "supervisor.toml"
    config.write_text("breaker_failures = 2\nbreaker_window = 120\nbreaker_cooldown = 600\n")
    slow = [enqueue("dis_slow", {}, dsn=dsn) for _ in range(2)]
    counted = enqueue("dis_slow_counted", {}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "2", "--config", str(config), "--poll-interval", "0.2",
                     log_path=tmp_path / "run.log", app="discard_handlers")
    try:
        wait_until(lambda: all(job_row(dsn, i)["state"] == "discarded" for i in slow),
                   timeout=180, what="the slow jobs to use their attempts")
        wait_until(lambda: job_row(dsn, counted)["state"] == "discarded", timeout=60,
                   what="the counted kind's poison")
    finally:
        sup.stop()
    # max_attempts=3 and six timeouts in all: three tries each, no poison, and the
    # breaker (more than two crashes) never paused the kind.
    for job_id in slow:
        row = job_row(dsn, job_id)
        assert row["attempt"] == 3
        assert [e["kind"] for e in row["errors"]] == ["timeout"] * 3
        assert all("signature" not in e for e in row["errors"])
    row = job_row(dsn, counted)
    assert [e["kind"] for e in row["errors"]] == ["timeout", "timeout", "poison"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        paused = [k for (k,) in conn.execute("SELECT kind FROM supervisor.kind_pauses")]
    assert "dis_slow" not in paused
    assert "kind dis_slow is paused" not in sup.err
