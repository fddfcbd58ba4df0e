"""What each attempt cost and printed (issues 26 and 29), through a real ``supervisor
run`` with real children: the usage the child measures against the handler's own
measurement, the output tail kept per attempt, and ``status --kinds`` over them."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner
from e2e import Supervisor, job_row, run_burst

from shared.enqueue import enqueue
from supervisor.cli.main import main

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]  # real supervisors: CI lane

KEEP = 64 * 1024


def burst(dsn: str, *args: str) -> Supervisor:
    return run_burst(dsn, "-n", "1", "--poll-interval", "0.1", *args, app="usage_handlers",
                     timeout=120)


def close(measured: float, own: float) -> bool:
    return abs(measured - own) <= 0.1 * own


def test_usage_of_a_cpu_spin_and_of_a_300_mb_job_match_their_own_measurements(dsn):
    spin = enqueue("usage_spin", {"seconds": 0.2}, dsn=dsn)
    alloc = enqueue("usage_alloc", {"megabytes": 300}, dsn=dsn)
    small = enqueue("usage_silent", {}, dsn=dsn)
    burst(dsn)
    row = job_row(dsn, spin)
    assert row["state"] == "completed", row
    usage = row["usage"]
    assert set(usage) == {"cpu_seconds", "wall_seconds", "max_rss_bytes"}
    assert close(usage["cpu_seconds"], row["result"]["cpu"]), (usage, row["result"])
    assert close(usage["wall_seconds"], row["result"]["wall"]), (usage, row["result"])
    row = job_row(dsn, alloc)
    assert row["state"] == "completed", row
    assert close(row["usage"]["max_rss_bytes"], row["result"]["rss"]), (row["usage"],
                                                                        row["result"])
    # The mark is reset at each job's start: the next job's peak is not the 300 MB one.
    assert job_row(dsn, small)["usage"]["max_rss_bytes"] < 200 << 20


def test_cpu_time_of_a_process_the_handler_ran_counts_and_stays_with_its_job(dsn):
    before = enqueue("usage_silent", {}, dsn=dsn)
    spawner = enqueue("usage_subprocess_spin", {"seconds": 0.3}, dsn=dsn)
    after = enqueue("usage_silent", {}, dsn=dsn)
    burst(dsn)
    assert job_row(dsn, spawner)["usage"]["cpu_seconds"] >= 0.3
    for job_id in (before, after):
        assert job_row(dsn, job_id)["usage"]["cpu_seconds"] < 0.1


def test_a_job_that_prints_one_mb_keeps_its_last_64_kib_and_a_silent_one_nothing(dsn):
    loud = enqueue("usage_print", {"total": 1 << 20}, dsn=dsn)
    quiet = enqueue("usage_silent", {}, dsn=dsn)
    sup = burst(dsn)
    row = job_row(dsn, loud)
    assert row["state"] == "completed", row
    assert len(row["output"]) == KEEP
    assert row["output"].endswith("x" * 90 + "\nEND\n")
    # The supervisor's own log still has every line, tagged with the job.
    assert f"[job {loud} usage_print stdout] 00000000 " in sup.err
    row = job_row(dsn, quiet)
    assert row["state"] == "completed" and row["output"] is None
    assert row["usage"] is not None


def test_output_capture_zero_keeps_nothing(dsn):
    loud = enqueue("usage_print", {"total": 1000}, dsn=dsn)
    burst(dsn, "--output-capture", "0")
    row = job_row(dsn, loud)
    assert row["state"] == "completed" and row["output"] is None


def test_a_failed_attempt_keeps_its_usage_and_output_in_its_errors_entry(dsn):
    job_id = enqueue("usage_print_and_fail", {"attempt_note": "first"}, max_attempts=1,
                     dsn=dsn)
    burst(dsn)
    row = job_row(dsn, job_id)
    assert row["state"] == "discarded", row
    (entry,) = row["errors"]
    assert entry["kind"] == "error" and "it printed, then failed" in entry["message"]
    assert "first <b>on stdout</b>\n" in entry["output"]
    assert "and on stderr\n" in entry["output"]
    assert set(entry["usage"]) == {"cpu_seconds", "wall_seconds", "max_rss_bytes"}
    assert row["usage"] == entry["usage"] and row["output"] == entry["output"]
    shown = CliRunner().invoke(main, ["jobs", "show", str(job_id), "--dsn", dsn])
    assert shown.exit_code == 0, shown.output
    assert "usage: wall " in shown.output and "first <b>on stdout</b>" in shown.output


def test_status_kinds_shows_what_each_kind_cost(dsn):
    for _ in range(3):
        enqueue("usage_spin", {"seconds": 0.05}, dsn=dsn)
    enqueue("usage_print_and_fail", {}, max_attempts=1, dsn=dsn)
    burst(dsn)
    result = CliRunner().invoke(main, ["status", "--kinds", "--json", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    kinds = {k["kind"]: k for k in orjson.loads(result.output)["kinds"]}
    spin = kinds["usage_spin"]
    assert spin["jobs"] == 3 and spin["failure_rate"] == 0
    assert 0.04 <= spin["cpu_seconds"]["p50"] <= spin["cpu_seconds"]["p95"]
    assert spin["wall_seconds"]["p95"] >= spin["cpu_seconds"]["p50"] * 0.9
    assert spin["max_rss_bytes"]["p50"] > 1 << 20
    assert kinds["usage_print_and_fail"]["failure_rate"] == 1.0
    text = CliRunner().invoke(main, ["status", "--kinds", "--dsn", dsn]).output
    assert "kinds, last hour's finished jobs" in text
    line = next(x for x in text.splitlines() if x.startswith("usage_spin"))
    assert "0.0%" in line and "MiB" in line
