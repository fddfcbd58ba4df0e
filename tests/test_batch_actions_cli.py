"""``supervisor batches cancel|retry|pause|resume|priority ID`` (issue 42) on real
PostgreSQL: what each says and does, and one-line refusals that change nothing."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from shared.batches import Callback
from shared.enqueue import enqueue_many
from supervisor.cli.main import main

pytestmark = pytest.mark.timeout(120)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def states(conn, batch_id: int) -> dict[str, int]:
    return dict(conn.execute("SELECT state, count(*) FROM supervisor.jobs WHERE batch_id = %s"
                             " GROUP BY state", (batch_id,)).fetchall())


def test_pause_priority_resume_and_cancel_from_the_command_line(conn, dsn):
    batch = enqueue_many("bt_member", [{"n": i} for i in range(30)],
                         then=Callback("bt_callback", {}), dsn=dsn)
    paused = invoke("batches", "pause", str(batch.id), "--dsn", dsn)
    assert paused.exit_code == 0, paused.output
    assert paused.output.startswith(f"batch {batch.id}: 30 members held in ")
    shown = invoke("batches", "show", str(batch.id), "--dsn", dsn)
    assert f"paused:   no member starts until `supervisor batches resume {batch.id}`" \
        in shown.output
    # A negative priority after `--`, as any negative argument.
    prio = invoke("batches", "priority", str(batch.id), "--dsn", dsn, "--", "-3")
    assert prio.exit_code == 0, prio.output
    assert "30 members now at priority -3" in prio.output
    assert conn.execute("SELECT DISTINCT priority FROM supervisor.jobs WHERE batch_id = %s",
                        (batch.id,)).fetchall() == [(-3,)]
    resumed = invoke("batches", "resume", str(batch.id), "--dsn", dsn)
    assert resumed.exit_code == 0 and "30 members released" in resumed.output
    assert states(conn, batch.id) == {"available": 30}
    cancelled = invoke("batches", "cancel", str(batch.id), "--dsn", dsn)
    assert cancelled.exit_code == 0 and "30 members cancelled" in cancelled.output
    data = orjson.loads(invoke("batches", "show", str(batch.id), "--json", "--dsn",
                               dsn).output)
    assert (data["stopped"], data["cancelled"], data["aborted"]) == ("cancelled", 30, False)
    assert data["callback_id"] is not None
    shown = invoke("batches", "show", str(batch.id), "--dsn", dsn)
    assert "cancelled by an operator" in shown.output


@pytest.mark.parametrize("action", ["cancel", "retry", "pause", "resume"])
def test_refusals_are_one_line_and_change_nothing(conn, dsn, action):
    batch = enqueue_many("bt_member", [{}, {}], then=Callback("bt_callback", {}), dsn=dsn)
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE batch_id = %s", (batch.id,))
    before = conn.execute("SELECT * FROM supervisor.batches").fetchall()
    for args, text in (([str(batch.id)], f"batch {batch.id}"),
                       (["4242"], "no batch 4242"),
                       (["x"], "batch id must be a number"),
                       (["0"], "batch id must be a positive number")):
        result = invoke("batches", action, *args, "--dsn", dsn)
        assert result.exit_code != 0, result.output
        assert text in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1
    assert conn.execute("SELECT * FROM supervisor.batches").fetchall() == before
    assert states(conn, batch.id) == {"completed": 2}


def test_a_priority_out_of_range_is_refused(dsn):
    batch = enqueue_many("bt_member", [{}], then=Callback("bt_callback", {}), dsn=dsn)
    result = invoke("batches", "priority", str(batch.id), str(2**40), "--dsn", dsn)
    assert result.exit_code != 0 and "Traceback" not in result.output
