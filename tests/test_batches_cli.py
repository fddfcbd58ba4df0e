"""``supervisor batches list|show`` and ``jobs show`` naming a job's batch and
dependencies, on real PostgreSQL."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from shared.batches import Callback
from shared.enqueue import enqueue, enqueue_many
from supervisor.cli.main import main

pytestmark = pytest.mark.timeout(60)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_batches_list_and_show_count_members_and_name_the_callback(conn, dsn):
    open_batch = enqueue_many("bt_member", [{}, {}], then=Callback("bt_callback", {}), dsn=dsn)
    closed = enqueue_many("bt_member", [{}, {}, {}], then=Callback("bt_callback", {}), dsn=dsn)
    conn.execute("UPDATE supervisor.jobs SET state = 'discarded', finished_at = now() "
                 "WHERE id = %s", (closed.ids[0],))
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE id = ANY(%s)", (closed.ids[1:],))
    listed = invoke("batches", "list", "--json", "--dsn", dsn)
    assert listed.exit_code == 0, listed.output
    rows = {r["id"]: r for r in orjson.loads(listed.output)}
    assert (rows[open_batch.id]["pending"], rows[open_batch.id]["callback_id"]) == (2, None)
    assert (rows[closed.id]["completed"], rows[closed.id]["discarded"]) == (2, 1)
    shown = invoke("batches", "show", str(closed.id), "--dsn", dsn)
    assert shown.exit_code == 0, shown.output
    cb = rows[closed.id]["callback_id"]
    assert f"batch {closed.id}: 3 jobs, 0 pending, 2 completed, 1 discarded" in shown.output
    assert f"bt_callback job {cb} (available)" in shown.output
    table = invoke("batches", "list", "--dsn", dsn)
    assert "(when the last job is final)" in table.output


def test_batches_show_refuses_bad_and_unknown_ids_in_one_line(dsn):
    for arg, text in (("x", "must be a number"), ("4242", "no batch 4242")):
        result = invoke("batches", "show", arg, "--dsn", dsn)
        assert result.exit_code != 0
        assert text in result.output and "Traceback" not in result.output


def test_jobs_show_names_the_batch_and_the_dependencies(dsn):
    batch = enqueue_many("bt_member", [{}], then=Callback("bt_callback", {}), dsn=dsn)
    other = enqueue("bt_member", {}, dsn=dsn)
    later = enqueue("bt_member", {}, depends_on=[batch.ids[0], other], dsn=dsn)
    member = invoke("jobs", "show", str(batch.ids[0]), "--dsn", dsn)
    assert f"batch:            {batch.id}" in member.output
    held = invoke("jobs", "show", str(later), "--dsn", dsn)
    assert f"depends on:       {batch.ids[0]}, {other}" in held.output
    assert "is scheduled" in held.output
    listed = invoke("jobs", "list", "--dsn", dsn)
    assert "after 2 dependencies" in listed.output
