"""Batches through real supervisors: two racing, one SIGKILLed mid-batch, a discarded
member, and the callback streaming every member's result."""

import signal

import pytest
from e2e import Supervisor, read_log, wait_all, wait_until

from shared.batches import Callback
from shared.enqueue import enqueue_many

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

APP = "batches_handlers"


def callback_lines(log):
    return [r for r in read_log(log) if r["event"] == "callback"]


def run_burst(dsn, log, *args):
    sup = Supervisor(dsn, "--burst", "-q", "bt", *args, log_path=log, app=APP)
    return sup


def test_two_supervisors_racing_enqueue_the_callback_once(dsn, tmp_path):
    log = tmp_path / "runs.log"
    batch = enqueue_many("bt_member", [{"n": i} for i in range(400)], queue="bt",
                         then=Callback("bt_callback", {"tag": "two"}, queue="bt"), dsn=dsn)
    sups = [run_burst(dsn, log, "-n", "2") for _ in range(2)]
    wait_all(sups, 120)
    [line] = callback_lines(log)
    assert (line["total"], line["completed"], line["streamed"]) == (400, 400, 400)
    assert line["result_sum"] == sum(range(400))
    assert line["tag"] == "two" and line["batch"] == batch.id
    ran_by = {r["pid"] for r in read_log(log) if r["event"] == "run"}
    assert len(ran_by) >= 2  # both supervisors' children really took part


def test_a_supervisor_killed_mid_batch_still_yields_one_callback(dsn, tmp_path):
    log = tmp_path / "runs.log"
    args = [{"n": i, "sleep": 0.2} for i in range(30)]
    enqueue_many("bt_member", args, queue="bt", then=Callback("bt_callback", {}, queue="bt"),
                 dsn=dsn)
    config = tmp_path / "supervisor.toml"
    config.write_text("maintenance_interval = 0.3\npoll_interval = 0.2\n")
    first = Supervisor(dsn, "-n", "2", "-q", "bt", "--lease-ttl", "2", "--config", str(config),
                       log_path=log, app=APP)
    try:
        wait_until(lambda: len(read_log(log)) >= 4, what="members running")
        first.signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.stop()
    second = Supervisor(dsn, "-n", "2", "-q", "bt", "--config", str(config), log_path=log,
                        app=APP)
    try:
        wait_until(lambda: callback_lines(log), timeout=90, what="the callback")
        second.signal(signal.SIGTERM)
        assert second.wait(30) == 0
    finally:
        second.stop()
    [line] = callback_lines(log)
    assert line["total"] == 30 and line["completed"] + line["discarded"] == 30
    assert line["streamed"] == 30


def test_a_discarded_member_still_closes_the_batch(dsn, tmp_path):
    log = tmp_path / "runs.log"
    args = [{"n": i, "fail": i == 3} for i in range(6)]
    enqueue_many("bt_member", args, queue="bt", then=Callback("bt_callback", {}, queue="bt"),
                 dsn=dsn)
    sup = run_burst(dsn, log, "-n", "2")
    try:
        # A burst whose jobs ended discarded exits 3 (CLI_JOBS_FAILED, issue 47).
        assert sup.wait(60) == 3, sup.err
    finally:
        sup.stop()
    [line] = callback_lines(log)
    assert (line["completed"], line["discarded"], line["streamed"]) == (5, 1, 6)
    assert line["states"] == {"completed": 5, "discarded": 1}


def test_a_batch_of_100k_noop_members_drains_and_the_callback_sees_them_all(dsn, tmp_path):
    log = tmp_path / "runs.log"
    n = 100_000
    enqueue_many("bt_noop", [{}] * n, queue="bt",
                 then=Callback("bt_callback", {"tag": "big"}, queue="bt"), dsn=dsn)
    sup = run_burst(dsn, log, "-n", "2")
    try:
        assert sup.wait(170) == 0, sup.err
    finally:
        sup.stop()
    [line] = callback_lines(log)
    assert (line["total"], line["completed"], line["streamed"]) == (n, n, n)
