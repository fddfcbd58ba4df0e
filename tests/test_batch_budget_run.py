"""The failure budget through real supervisors (issue 42): a batch whose members all
fail stops after max_failures (plus what its supervisor held when the abort committed:
each child's running job and the one queued to it) and calls back once with the
summary's ``aborted`` and reason."""

import time

import pytest
from click.testing import CliRunner
from e2e import Supervisor, read_log, wait_until

from shared.batches import Callback
from shared.enqueue import enqueue_many
from supervisor.cli.main import main

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

APP = "batch_actions_handlers"
CHILDREN = 2
HELD = 2  # per child: its running job and, with --prefetch 1, one queued


def events(log, event):
    return [r for r in read_log(log) if r["event"] == event]


def test_a_batch_whose_members_all_fail_stops_at_its_budget(dsn, tmp_path):
    log = tmp_path / "runs.log"
    bad = tmp_path / "bad-input"
    bad.write_text("x")
    # Members of 0.2 s, like real work: a supervisor writes the failures of jobs of a few
    # milliseconds in groups, and the children run several more before the one that
    # reaches the budget is written (17-21 attempts for max_failures=10 here).
    args = [{"n": i, "fail_if": str(bad), "sleep": 0.2} for i in range(300)]
    batch = enqueue_many("ba_member", args,
                         queue="ba", then=Callback("ba_callback", {}, queue="ba"),
                         max_failures=10, dsn=dsn)
    # One job held per child beyond its running one: what the supervisors hold when the
    # abort commits (running or queued to a child) is what may still fail after it.
    sup = Supervisor(dsn, "-n", str(CHILDREN), "--prefetch", "1", "-q", "ba", log_path=log,
                     app=APP)
    try:
        wait_until(lambda: events(log, "callback"), timeout=120, what="the callback")
        summary = batch.wait(timeout=30)
        time.sleep(1.0)  # a second callback would show by now
    finally:
        sup.stop()
    failed_runs = events(log, "run")
    assert 10 <= len(failed_runs) <= 10 + HELD * CHILDREN, len(failed_runs)
    [callback] = events(log, "callback")
    assert callback["aborted"] and callback["stopped"] == "aborted"
    assert "max_failures=10" in callback["reason"]
    assert callback["completed"] == 0 and callback["cancelled"] >= 300 - 10 - CHILDREN
    assert summary.aborted and "max_failures=10" in summary.reason
    shown = CliRunner().invoke(main, ["batches", "show", str(batch.id), "--dsn", dsn])
    assert shown.exit_code == 0, shown.output
    assert "aborted:  " in shown.output and "max_failures=10" in shown.output
