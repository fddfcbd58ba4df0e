"""`supervisor schedules list|pause|resume|run`: plain data from the database, one-line
errors for unknown names, no supervisor needed."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest
from click.testing import CliRunner
from e2e import ROOT

from shared.schedules import make_spec
from supervisor.cli.main import main
from supervisor.schedules import Schedules

pytestmark = pytest.mark.timeout(60)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def declare(conn):
    Schedules([make_spec("nightly", "report", cron="0 3 * * *", timezone="Europe/Berlin",
                         queue="reports"),
               make_spec("poll", "poll_feed", every=30)], "sv-test").fire_due(conn)


def test_list_shows_every_schedule_with_next_and_last_fire(dsn, conn):
    assert invoke("schedules", "list", "--dsn", dsn).output.startswith("no schedules")
    declare(conn)
    out = invoke("schedules", "list", "--dsn", dsn)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "EXPRESSION", "TZ", "STATUS", "NEXT", "LAST",
                                "LAST", "STATE"]
    assert lines[1].startswith("nightly") and "0 3 * * *" in lines[1]
    assert "Europe/Berlin" in lines[1]
    assert lines[2].startswith("poll") and "every 30s" in lines[2] and "active" in lines[2]
    rows = orjson.loads(invoke("schedules", "list", "--json", "--dsn", dsn).output)
    assert [(r["name"], r["status"], r["last_job_id"]) for r in rows] == [
        ("nightly", "active", None), ("poll", "active", None)]
    assert all(r["next_fire"] for r in rows)


def test_pause_resume_and_run_now(dsn, conn):
    declare(conn)
    assert invoke("schedules", "pause", "poll", "--dsn", dsn).output == "paused schedule 'poll'\n"
    rows = orjson.loads(invoke("schedules", "list", "--json", "--dsn", dsn).output)
    assert {r["name"]: r["status"] for r in rows}["poll"] == "paused"
    ran = invoke("schedules", "run", "poll", "--dsn", dsn)
    assert ran.exit_code == 0, ran.output
    job_id = int(ran.output)
    assert conn.execute("SELECT kind, state FROM supervisor.jobs WHERE id = %s",
                        (job_id,)).fetchone() == ("poll_feed", "available")
    out = invoke("schedules", "resume", "poll", "--dsn", dsn)
    assert out.output == "resumed schedule 'poll'\n"
    rows = orjson.loads(invoke("schedules", "list", "--json", "--dsn", dsn).output)
    poll = {r["name"]: r for r in rows}["poll"]
    assert poll["status"] == "active" and poll["last_job_id"] == job_id
    assert poll["last_state"] == "available"


@pytest.mark.parametrize("command", ["pause", "resume", "run"])
def test_unknown_names_are_one_line_usage_errors(dsn, conn, command):
    declare(conn)
    out = invoke("schedules", command, "nope'; DROP TABLE supervisor.jobs; --", "--dsn", dsn)
    assert out.exit_code == 2
    assert out.output.count("\n") == 1 and "no schedule named" in out.output
    assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0] == 0


def test_a_bad_schedule_in_an_app_stops_run_with_one_line(tmp_path):
    (tmp_path / "bad_sched_app.py").write_text(
        "from workers import job\n\n"
        "@job(cron='0 25 * * *', timezone='Europe/Berlin')\n"
        "def nightly():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
           "SUPERVISOR_DSN": "postgresql://nobody@127.0.0.1:1/none"}
    done = subprocess.run([sys.executable, "-m", "supervisor", "run", "--app", "bad_sched_app"],
                          env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "schedule 'nightly': invalid cron expression '0 25 * * *': Bad hour" in done.stderr


def test_status_shows_the_next_fires(dsn, conn):
    declare(conn)
    result = invoke("status", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert "next schedule fires" in result.output and "poll" in result.output
    snapshot = orjson.loads(invoke("status", "--json", "--dsn", dsn).output)
    assert {fire["name"] for fire in snapshot["next_fires"]} == {"nightly", "poll"}
