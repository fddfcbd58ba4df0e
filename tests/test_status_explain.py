"""``supervisor status --explain`` on a running supervisor (issue 41): per queue it
serves, the live claim, depth, pipe, carry waits and per kind the overrun threshold and
pipe cap, each with the rule of ``supervisor/tuning.py`` that set it, as the supervisor
published them on its heartbeat; and a debug line when a value moved.
"""

from __future__ import annotations

import math
import re

import orjson
import psycopg
import pytest
from click.testing import CliRunner
from e2e import Supervisor, wait_until

from shared.enqueue import enqueue_many
from supervisor.cli.main import main
from supervisor.tuning import DEFAULT

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # a real supervisor: CI lane

QUEUES = ("default", "weighted_a", "weighted_b")


def _explained(dsn: str) -> dict:
    result = CliRunner().invoke(main, ["status", "--explain", "--json", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    return orjson.loads(result.output)


def _measured(dsn: str) -> dict | None:
    """The one live supervisor's published queues, once both worked queues show a
    measured run time (None until a heartbeat after their jobs carries them)."""
    sups = _explained(dsn)["explain"]
    if len(sups) != 1:
        return None
    queues = sups[0]["queues"]
    if all(queues.get(q, {}).get("run_time") for q in ("default", "weighted_a")):
        return queues
    return None


def test_status_explain_shows_each_served_queues_rules(dsn, tmp_path):
    config = tmp_path / "supervisor.toml"
    config.write_text("maintenance_interval = 0.5\n")  # a heartbeat every half second
    sup = Supervisor(dsn, "-n", "2", "--config", str(config), "--log-level", "debug",
                     *(arg for q in QUEUES for arg in ("-q", q)))
    try:
        enqueue_many("e2e_sleep", [{"seconds": 0.02}] * 40, dsn=dsn)
        enqueue_many("e2e_work_a", [{"seconds": 0.2}] * 4, queue="weighted_a", dsn=dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            wait_until(lambda: conn.execute(
                "SELECT count(*) FROM supervisor.jobs WHERE state = 'completed'"
            ).fetchone()[0] == 44, timeout=60, what="every job completed")
        queues = wait_until(lambda: _measured(dsn), timeout=30,
                            what="a heartbeat with both queues' run times")
        assert isinstance(queues, dict) and set(queues) == set(QUEUES)

        # 20 ms jobs: a claim covers 0.1 s of work per child, unless a slow claim (a
        # loaded machine) asks for more: what was published follows from what was
        # measured, by the table's rules.
        short = queues["default"]
        run_time, typical = short["run_time"], short["typical_run_time"]
        by_latency = math.ceil(DEFAULT.claim_round_trips * short["claim_latency"]
                               / run_time) + 2
        covers = math.ceil(DEFAULT.claim_covers / max(run_time, typical))
        expected = ({"value": covers, "rule": "claim_covers"} if covers > by_latency
                    else {"value": by_latency, "rule": "claim_round_trips"})
        assert short["depth"] == expected, short
        assert short["pipe"] == expected
        # The claim is the depth for each child allotted; once a claim came back short
        # after its work, no child is allotted and nothing is claimed.
        assert short["claim"] == ({"value": short["children"] * expected["value"],
                                   "rule": expected["rule"]} if short["children"]
                                  else {"value": 0, "rule": "no work"})
        assert short["carry"]["claim_coming"] == {"value": 0.1, "rule": "claim_carry_wait"}
        sleep = short["kinds"]["e2e_sleep"]
        overrun = DEFAULT.overrun_factor * sleep["p95"]
        assert sleep["p95"] >= 0.02 and sleep["overrun_after"] == (
            {"value": DEFAULT.min_overrun, "rule": "min_overrun"}
            if overrun <= DEFAULT.min_overrun
            else {"value": pytest.approx(overrun, abs=1e-5), "rule": "overrun_factor"})
        assert sleep["pipe_cap"] == {"value": None, "rule": "no tail runs"}

        long = queues["weighted_a"]  # 0.2 s jobs: two per pipe, no carry wait
        assert long["pipe"] == {"value": 2, "rule": "long_job_pipe"}
        assert long["carry"]["claim_coming"] == {"value": None, "rule": "long_job"}
        assert long["kinds"]["e2e_work_a"]["overrun_after"]["value"] >= 0.4

        idle = queues["weighted_b"]  # served, never ran a job
        assert idle["depth"] == {"value": 1, "rule": "unmeasured"}
        assert idle["claim"] == {"value": 0, "rule": "no work"} and idle["kinds"] == {}

        text = CliRunner().invoke(main, ["status", "--explain", "--dsn", dsn]).output
        assert "rules: supervisor/tuning.py" in text
        for line in ("default ", "weighted_a ", "weighted_b "):
            assert any(row.startswith(line) for row in text.splitlines()), (line, text)
        # The text is a later heartbeat's than the figures above: the claim's latency
        # (and so the depth) may have moved in between on a loaded machine; the rule
        # that sets the depth is printed with its value either way.
        tuning = text[text.index("tuning of "):]
        default_row = next(row for row in tuning.splitlines() if row.startswith("default "))
        assert re.search(r"\b\d+ \((claim_round_trips|claim_covers)\)", default_row), text
        assert "2 (long_job_pipe)" in text
        # The first measured run time moved the depth: said at debug.
        assert "queue default: depth is now " in sup.err
        assert "(was 1 (unmeasured))" in sup.err
    finally:
        sup.stop()


def test_status_explain_without_a_live_supervisor(dsn):
    result = CliRunner().invoke(main, ["status", "--explain", "--dsn", dsn])
    assert result.exit_code == 0 and "tuning: no live supervisor" in result.output
