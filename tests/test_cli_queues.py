"""`supervisor queues list|pause|resume`: pausing stops claims without a restart,
resuming wakes supervisors, odd queue names are data, never SQL."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner
from e2e import job_row, run_burst

from shared.enqueue import enqueue
from supervisor.cli.main import main

pytestmark = pytest.mark.timeout(60)

ODD = "it's; DROP TABLE supervisor.jobs; --"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.slow
def test_pause_stops_claims_and_resume_lets_them_run(dsn):
    result = invoke("queues", "pause", "default", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    job_id = enqueue("e2e_noop", {"n": 1}, dsn=dsn)
    run_burst(dsn, "-n", "1")
    row = job_row(dsn, job_id)
    assert (row["state"], row["attempt"]) == ("available", 0)

    result = invoke("queues", "resume", "default", "--dsn", dsn)
    assert result.output == "resumed queue 'default' (was paused; 1 available jobs)\n"
    run_burst(dsn, "-n", "1")
    assert job_row(dsn, job_id)["state"] == "completed"


def test_odd_names_list_and_resume_notifies(dsn, conn):
    conn.execute("INSERT INTO supervisor.jobs (kind, queue) VALUES ('k', %s), ('k', 'b')",
                 (ODD,))
    result = invoke("queues", "pause", ODD, "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert "supervisors stop claiming from it; 1 available jobs wait" in result.output
    assert "already paused" in invoke("queues", "pause", ODD, "--dsn", dsn).output
    assert conn.execute("SELECT name, paused FROM supervisor.queues").fetchall() == [(ODD, True)]

    listed = orjson.loads(invoke("queues", "list", "--json", "--dsn", dsn).output)
    assert [(q["name"], q["paused"], q["available"]) for q in listed] == [
        ("b", False, 1), (ODD, True, 1)]
    text = invoke("queues", "list", "--dsn", dsn).output.splitlines()
    assert text[0].split() == ["QUEUE", "PAUSED", "AVAIL", "RUN", "OLDEST", "LIMITS"]
    assert text[2].startswith(ODD) and text[2][len(ODD):].split()[:3] == ["paused", "1", "0"]

    conn.execute("LISTEN supervisor_jobs")
    result = invoke("queues", "resume", ODD, "--dsn", dsn)
    assert "was paused" in result.output
    assert [n.payload for n in conn.notifies(timeout=5, stop_after=1)] == [ODD]
    assert "was not paused" in invoke("queues", "resume", "never-seen", "--dsn", dsn).output


def test_empty_queue_name_is_a_usage_error(dsn):
    result = invoke("queues", "pause", "", "--dsn", dsn)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "supervisor: error: a queue name has 1 to 255 characters; got 0"]
