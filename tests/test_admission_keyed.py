"""A job beyond a supervisor's whole budget on a queue with a per-key limit (issue 45):
released once and skipped by later claims, as on a plain queue.

The keyed claim runs in the schema's ``claim_keyed()``, which took no bounds: the job
was claimed and released about 400 times a second (each release woke the next claim),
and each release logged a line. The claim's bounds now reach it (0024)."""

from __future__ import annotations

import psycopg
import pytest
from click.testing import CliRunner
from e2e import Supervisor, wait_until

from shared.enqueue import enqueue
from supervisor.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LEFT = "left for another supervisor"


def _completed(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM supervisor.jobs "
                            "WHERE state = 'completed'").fetchone()[0]


@pytest.mark.parametrize("aging", [None, "5"])
def test_a_keyed_job_beyond_the_budget_is_released_once(dsn, tmp_path, aging):
    args = ["queues", "limit", "default", "--per-key-max-running", "1", "--dsn", dsn]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    config = tmp_path / "supervisor.toml"
    config.write_text(f"[queues.default]\naging = {aging}\n" if aging else "")
    huge = enqueue("adm_hold", {"seconds": 0.1}, memory="1GiB", concurrency_key="k1",
                   dsn=dsn)
    fine = [enqueue("adm_hold", {"seconds": 0.05}, concurrency_key=f"k{i % 3}", dsn=dsn)
            for i in range(9)]
    sup = Supervisor(dsn, "-n", "2", "--memory-budget", "256MiB", "--config", str(config),
                     app="admission_handlers")
    try:
        wait_until(lambda: _completed(dsn) == len(fine), timeout=60,
                   what="the fitting jobs")
        # More keyed jobs later: each claim of the queue must pass over the big one.
        more = [enqueue("adm_hold", {"seconds": 0.05}, concurrency_key="k1", dsn=dsn)
                for _ in range(3)]
        wait_until(lambda: _completed(dsn) == len(fine) + len(more), timeout=60,
                   what="the later jobs")
        with psycopg.connect(dsn, autocommit=True) as conn:
            (claims,) = conn.execute(
                "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = "
                "'supervisor.jobs'::regclass").fetchone()
    finally:
        sup.stop()
    assert sup.err.count(LEFT) == 1, sup.err[-3000:]
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT state, attempt FROM supervisor.jobs WHERE id = %s",
                           (huge,)).fetchone()
    assert row == ("available", 0), row
    # 12 jobs claimed, started and completed, one claim and release of the big one: a
    # loop of claims and releases would have updated its row hundreds of times.
    assert claims < 100, claims
