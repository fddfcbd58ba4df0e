"""The failure budget through real supervisors (issue 42): a batch whose members all
fail stops after max_failures (plus what its children had in hand) and calls back once
with the summary's ``aborted`` and reason."""

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


def events(log, event):
    return [r for r in read_log(log) if r["event"] == event]


def test_a_batch_whose_members_all_fail_stops_at_its_budget(dsn, tmp_path):
    log = tmp_path / "runs.log"
    bad = tmp_path / "bad-input"
    bad.write_text("x")
    batch = enqueue_many("ba_member", [{"n": i, "fail_if": str(bad)} for i in range(300)],
                         queue="ba", then=Callback("ba_callback", {}, queue="ba"),
                         max_failures=10, dsn=dsn)
    sup = Supervisor(dsn, "-n", str(CHILDREN), "-q", "ba", log_path=log, app=APP)
    try:
        wait_until(lambda: events(log, "callback"), timeout=120, what="the callback")
        summary = batch.wait(timeout=30)
        time.sleep(1.0)  # a second callback would show by now
    finally:
        sup.stop()
    failed_runs = events(log, "run")
    assert 10 <= len(failed_runs) <= 10 + CHILDREN
    [callback] = events(log, "callback")
    assert callback["aborted"] and callback["stopped"] == "aborted"
    assert "max_failures=10" in callback["reason"]
    assert callback["completed"] == 0 and callback["cancelled"] >= 300 - 10 - CHILDREN
    assert summary.aborted and "max_failures=10" in summary.reason
    shown = CliRunner().invoke(main, ["batches", "show", str(batch.id), "--dsn", dsn])
    assert shown.exit_code == 0, shown.output
    assert "aborted:  " in shown.output and "max_failures=10" in shown.output
