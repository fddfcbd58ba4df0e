"""Args PostgreSQL stores but the child cannot decode, through a real ``supervisor run``:
the job is discarded at once with kind ``args`` and the child lives on (issue 10, "bad
input stays with its job")."""

from __future__ import annotations

import psycopg
import pytest
from e2e import job_row, read_log, run_burst

from shared.enqueue import enqueue_many


def outcome(dsn: str, job_id: int) -> tuple[str, int, list]:
    # Not the whole row: Python's json cannot load args 2,000 deep either.
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT state, attempt, errors FROM supervisor.jobs WHERE id = %s",
                            (job_id,)).fetchone()


def insert_raw(dsn: str, kind: str, args_text: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("INSERT INTO supervisor.jobs (kind, args) VALUES (%s, %s::jsonb)"
                            " RETURNING id", (kind, args_text)).fetchone()[0]


@pytest.mark.slow
def test_args_orjson_cannot_parse_are_discarded_as_args_and_the_child_survives(dsn,
                                                                             tmp_path):
    log = tmp_path / "runs.log"
    huge = insert_raw(dsn, "e2e_noop", '{"n": 1e400}')
    deep = insert_raw(dsn, "e2e_noop", '{"n": ' + "[" * 2000 + "]" * 2000 + "}")
    fine = enqueue_many("e2e_noop", [{"n": i} for i in range(6)], dsn=dsn)
    run_burst(dsn, "-n", "1", "--poll-interval", "0.1", log_path=log)
    for job_id, problem in ((huge, "infinity"), (deep, "depth")):
        state, attempt, errors = outcome(dsn, job_id)
        assert (state, attempt) == ("discarded", 1), errors
        assert errors[0]["kind"] == "args" and problem in errors[0]["message"]
    assert all(job_row(dsn, i)["state"] == "completed" for i in fine)
    # One child ran everything: bad args never cost a process.
    assert len({r["pid"] for r in read_log(log)}) == 1
