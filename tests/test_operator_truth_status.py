"""Issue 47: a dead supervisor must not look alive. After SIGKILL, ``supervisor status``
showed it live and "1/2 busy" for its registry row's whole minute. Now a supervisor
three maintenance rounds silent is listed as presumed dead, with when it was last seen
and the jobs it still holds; a live one rescues them once their leases expire."""

from __future__ import annotations

import signal

import orjson
import pytest
from click.testing import CliRunner
from e2e import Supervisor, job_row, wait_until

from shared.enqueue import enqueue
from supervisor.admin.status import LIVE_AFTER_SECONDS
from supervisor.cli.main import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _status(dsn: str) -> dict:
    result = CliRunner().invoke(main, ["status", "--json", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    return orjson.loads(result.output)


def test_a_killed_supervisor_is_presumed_dead_and_its_job_rescued(dsn, tmp_path):
    gate = tmp_path / "gate"
    job_id = enqueue("e2e_wait_for", {"path": str(gate), "timeout": 120}, dsn=dsn)
    dead = Supervisor(dsn, "-n", "2", "--lease-ttl", "3")
    try:
        wait_until(lambda: job_row(dsn, job_id)["attempted_at"] is not None, timeout=60,
                   what="the job to start")
        wait_until(lambda: any(s["busy"] == 1 for s in _status(dsn)["supervisors"]),
                   timeout=30, what="a beat saying 1/2 busy")
        dead.signal(signal.SIGKILL)
        dead.wait(10)
    finally:
        dead.stop()
    snapshot = wait_until(lambda: (s := _status(dsn))["presumed_dead"] and s, timeout=60,
                          what="the killed supervisor presumed dead")
    assert snapshot["supervisors"] == []  # no longer shown live, nor "1/2 busy"
    [silent] = snapshot["presumed_dead"]
    assert silent["pid"] == dead.pid and silent["busy"] == 1
    assert silent["heartbeat_age"] >= LIVE_AFTER_SECONDS
    assert silent["jobs_held"] == 1
    text = CliRunner().invoke(main, ["status", "--dsn", dsn]).output
    assert "presumed dead: " in text and f"pid {dead.pid}" in text and "last seen" in text
    assert "Its 1 job goes back" in text
    # A live supervisor rescues the job once its lease has expired, and runs it.
    gate.touch()
    alive = Supervisor(dsn, "-n", "1", "--lease-ttl", "3")
    try:
        wait_until(lambda: job_row(dsn, job_id)["state"] == "completed", timeout=60,
                   what="the rescued job to complete")
        assert job_row(dsn, job_id)["attempt"] == 2
    finally:
        alive.signal(signal.SIGTERM)
        alive.wait(30)
        alive.stop()


@pytest.mark.parametrize("as_json", [True, False])
def test_jobs_held_for_their_dependencies_are_named_as_such(dsn, conn, as_json):
    first = enqueue("e2e_noop", dsn=dsn)
    enqueue("e2e_noop", depends_on=[first], dsn=dsn)
    enqueue("e2e_noop", delay=3600, dsn=dsn)
    args = ["status", "--dsn", dsn] + (["--json"] if as_json else [])
    output = CliRunner().invoke(main, args).output
    if as_json:
        [queue] = orjson.loads(output)["queues"]
        assert queue["counts"]["scheduled"] == 2 and queue["waiting_for_dependencies"] == 1
    else:
        assert ("waiting for their dependencies, not for a time (counted in SCHED): "
                "default 1") in output


def test_what_waits_is_told_apart_for_the_burst_progress(dsn, conn):
    from supervisor.db.run_outcomes import waiting

    first = enqueue("e2e_noop", dsn=dsn)
    for _ in range(12):
        enqueue("e2e_noop", depends_on=[first], dsn=dsn)
    enqueue("e2e_noop", delay=60, dsn=dsn)
    found = waiting(conn, ["default"])
    assert (found.timed, found.held) == (1, 12)
    assert found.next_due_in is not None and 0 < found.next_due_in <= 60
