"""The issue 50 run, with a real ``supervisor run``: a job failing 20 times with 65,000
characters of distinct words beside 100 ordinary and 20 failing jobs. Before schema
0022 and the split-on-refusal writer, its 12th failure passed the error search index's
limit and the write carrying it was retried whole for ever: other failures never
reached the table, jobs sat in ``running`` and ran again after their leases expired.
Now every outcome is written, no job is rescued or run twice, every job ends final."""

from __future__ import annotations

import signal
from collections import Counter

import psycopg
import pytest
from e2e import Supervisor, read_log, wait_until

from shared.enqueue import enqueue, enqueue_many

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

APP = "test_writer_refused_rows_handlers"


def test_a_wordy_job_failing_twenty_times_stalls_no_other_write(dsn, tmp_path):
    log = tmp_path / "runs.log"
    wordy = enqueue("refused_wordy", dsn=dsn)
    normal = enqueue_many("refused_noop", [{"n": n} for n in range(100)], dsn=dsn)
    failing = enqueue_many("refused_fail", [{"n": n} for n in range(20)], dsn=dsn)

    def unfinished() -> int:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state NOT IN "
                                "('completed', 'discarded')").fetchone()[0]

    sup = Supervisor(dsn, "-n", "2", "--poll-interval", "0.1", log_path=log, app=APP)
    try:
        wait_until(lambda: unfinished() == 0, timeout=240, interval=0.5,
                   what="every job to end")
        sup.signal(signal.SIGTERM)
        assert sup.wait(60) == 0, sup.err
    finally:
        sup.stop()

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = {job_id: (state, errors) for job_id, state, errors in conn.execute(
            "SELECT id, state, errors FROM supervisor.jobs")}
        index_size = conn.execute(
            "SELECT pg_column_size(to_tsvector('simple', jsonb_path_query_array(errors, "
            "'$[*].message'))) FROM supervisor.jobs WHERE id = %s", (wordy,)).fetchone()[0]
    assert {rows[i][0] for i in normal} == {"completed"}
    assert {rows[i][0] for i in failing} == {"discarded"}
    assert [e["attempt"] for e in rows[wordy][1]] == list(range(1, 21))
    assert rows[wordy][0] == "discarded"
    assert index_size < 1048575
    # Nothing was rescued: every errors entry is the handler's own.
    assert {e["kind"] for _, errors in rows.values() for e in errors} == {"error"}
    for i in failing:
        assert [e["attempt"] for e in rows[i][1]] == [1, 2, 3]
    # Nothing ran twice: one run per (job, attempt), one attempt per ordinary job.
    runs = Counter((r["id"], r["attempt"]) for r in read_log(log))
    assert max(runs.values()) == 1
    assert sorted(a for (i, a) in runs if i == wordy) == list(range(1, 21))
    assert {i for (i, a) in runs if i in set(normal)} == set(normal)
    assert all(a == 1 for (i, a) in runs if i in set(normal))
    err = sup.err
    assert "could not be written" not in err
    assert "writing outcomes" not in err
    assert "the database refused" not in err
