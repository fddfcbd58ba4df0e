"""Rows removed or left behind under a batch or a dependency: a batch member deleted by
SQL is counted as gone (the batch closes over the members still there, as
docs/batches.md says), a job waiting for a deleted dependency says so in ``jobs show``,
and retrying a discarded dependency says which of its dependents stay cancelled."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from shared.batches import Callback
from shared.enqueue import enqueue, enqueue_many
from supervisor.cli.main import main

pytestmark = pytest.mark.timeout(60)


def invoke(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def finish(conn, ids, state):
    conn.execute("UPDATE supervisor.jobs SET state = %s, finished_at = now() WHERE id = ANY(%s)",
                 (state, list(ids)))


def test_a_deleted_member_is_gone_not_pending_and_the_batch_closes(conn, dsn):
    batch = enqueue_many("bt_member", [{}] * 5, then=Callback("bt_callback", {}), dsn=dsn)
    conn.execute("DELETE FROM supervisor.jobs WHERE id = %s", (batch.ids[0],))
    finish(conn, batch.ids[1:], "completed")
    shown = invoke("batches", "show", str(batch.id), "--dsn", dsn)
    assert shown.splitlines()[0] == (
        f"batch {batch.id}: 5 jobs, 0 pending, 4 completed, 0 discarded, 0 cancelled, "
        "1 gone (deleted, or pruned once final)")
    callback = conn.execute("SELECT callback_id FROM supervisor.batches WHERE id = %s",
                            (batch.id,)).fetchone()[0]
    assert callback is not None  # closed over the four still there


def test_a_job_waiting_for_a_deleted_dependency_says_so(conn, dsn):
    first = enqueue("bt_step", {"name": "a"}, dsn=dsn)
    held = enqueue("bt_step", {"name": "b"}, depends_on=[first], dsn=dsn)
    conn.execute("DELETE FROM supervisor.jobs WHERE id = %s", (first,))
    lines = invoke("jobs", "show", str(held), "--dsn", dsn).splitlines()
    assert (f"  waits for ever:   deleted dependency {first}; cancel this job "
            f"(supervisor jobs cancel {held})") in lines


def test_retrying_a_discarded_dependency_names_the_dependents_that_stay_cancelled(conn, dsn):
    first = enqueue("bt_step", {"name": "a"}, dsn=dsn)
    second = enqueue("bt_step", {"name": "b"}, depends_on=[first], dsn=dsn)
    third = enqueue("bt_step", {"name": "c"}, depends_on=[first], dsn=dsn)
    finish(conn, [first], "discarded")
    output = invoke("jobs", "retry", str(first), "--dsn", dsn)
    assert output == (f"retried job {first} (was discarded); it is available now\n"
                      f"note: 2 jobs cancelled because job {first} did not complete stay "
                      f"cancelled ({second}, {third}); enqueue them again once it completes\n")
    plain = enqueue("bt_step", {"name": "d"}, dsn=dsn)
    finish(conn, [plain], "discarded")
    assert invoke("jobs", "retry", str(plain), "--dsn", dsn) == (
        f"retried job {plain} (was discarded); it is available now\n")
