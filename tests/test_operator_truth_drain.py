"""Issue 47: a drain's stop notices use the kind's run times from the table when this
supervisor has completed none of that kind yet. Before, a supervisor that had just
started told every running job to checkpoint and stop, even one a moment from its end,
though the database held the kind's run times."""

from __future__ import annotations

import signal

import pytest
from e2e import Supervisor, job_row, wait_until

from shared.enqueue import enqueue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NOTICE = "cannot finish within"


def _seed_run_times(conn, kind: str, seconds: float, n: int = 20) -> None:
    conn.execute(
        "INSERT INTO supervisor.jobs (kind, queue, state, attempt, run_at, attempted_at, "
        "finished_at, usage) SELECT %s, 'default', 'completed', 1, now(), now(), now(), "
        "jsonb_build_object('wall_seconds', %s::float8, 'cpu_seconds', 0.1, "
        "'max_rss_bytes', 1000000) FROM generate_series(1, %s)", (kind, seconds, n))


@pytest.mark.parametrize("stored", [True, False])
def test_a_drain_judges_a_new_kind_by_the_tables_run_times(dsn, conn, tmp_path, stored):
    if stored:
        _seed_run_times(conn, "e2e_wait_for", 3.0)  # well within the 25 s grace
    gate = tmp_path / "gate"
    job_id = enqueue("e2e_wait_for", {"path": str(gate), "timeout": 60}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "1", "--grace", "25")
    try:
        wait_until(lambda: job_row(dsn, job_id)["attempted_at"] is not None, timeout=60,
                   what="the job to start")
        sup.signal(signal.SIGTERM)
        sup.wait_for_log("draining")
        gate.touch()
        assert sup.wait(60) == 0, sup.err
    finally:
        gate.touch()
        sup.stop()
    assert job_row(dsn, job_id)["state"] == "completed"
    if stored:
        assert NOTICE not in sup.err, sup.err  # expected to finish: left alone
    else:
        assert f"1 running jobs {NOTICE}" in sup.err, sup.err  # unknown: told
