"""jsonb keeps integers of any size; a producer writing plain SQL may store one past 64
bits. `jobs show` and `jobs list --json` print it exactly instead of failing."""

from __future__ import annotations

import json

from click.testing import CliRunner

from supervisor.cli.main import main

HUGE = 123456789012345678901234567890


def test_show_and_list_print_integers_past_64_bits(dsn, conn):
    job_id = conn.execute(
        "INSERT INTO supervisor.jobs (kind, queue, args) VALUES ('k', 'big', %s) RETURNING id",
        (json.dumps({"n": HUGE, "x": 1.5}),),
    ).fetchone()[0]
    runner = CliRunner()

    shown = runner.invoke(main, ["jobs", "show", str(job_id), "--dsn", dsn])
    assert shown.exit_code == 0, shown.output
    assert f'"n":{HUGE}' in shown.output

    as_json = runner.invoke(main, ["jobs", "show", str(job_id), "--json", "--dsn", dsn])
    assert as_json.exit_code == 0, as_json.output
    row = json.loads(as_json.output)
    assert row["args"] == {"n": HUGE, "x": 1.5}
    assert row["created_at"].count("T") == 1  # ISO 8601, as orjson writes it

    listed = runner.invoke(main, ["jobs", "list", "--queue", "big", "--json", "--dsn", dsn])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output)[0]["id"] == job_id
