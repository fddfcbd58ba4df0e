"""depends_on against real PostgreSQL: held back, promoted when every dependency
completed, cancelled (naming the dependency) when one did not; and through a real
supervisor, a chain runs in order."""

import threading

import psycopg
import pytest
from e2e import Supervisor, read_log

from shared.enqueue import enqueue
from shared.exitcodes import CLI_JOBS_FAILED
from supervisor.db.sql import PROMOTE

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]  # many databases: CI lane


def finish(conn, ids, state="completed"):
    conn.execute("UPDATE supervisor.jobs SET state = %s, finished_at = now() "
                 "WHERE id = ANY(%s)", (state, list(ids)))


def state(conn, job_id):
    return conn.execute("SELECT state FROM supervisor.jobs WHERE id = %s",
                        (job_id,)).fetchone()[0]


def test_a_dependent_waits_for_every_dependency_then_becomes_available(conn, dsn):
    a, b = enqueue("bt_step", {"name": "a"}, dsn=dsn), enqueue("bt_step", {"name": "b"}, dsn=dsn)
    c = enqueue("bt_step", {"name": "c"}, depends_on=[a, b], dsn=dsn)
    assert state(conn, c) == "scheduled"
    conn.execute(PROMOTE, {"limit": 100})  # the parent's promotion leaves it alone
    assert state(conn, c) == "scheduled"
    finish(conn, [a])
    assert state(conn, c) == "scheduled"
    finish(conn, [b])
    assert state(conn, c) == "available"


def test_a_failed_dependency_cancels_the_chain_naming_it(conn, dsn):
    a = enqueue("bt_step", {"name": "a"}, dsn=dsn)
    b = enqueue("bt_step", {"name": "b"}, depends_on=[a], dsn=dsn)
    c = enqueue("bt_step", {"name": "c"}, depends_on=[b], dsn=dsn)
    finish(conn, [a], "discarded")
    assert (state(conn, b), state(conn, c)) == ("cancelled", "cancelled")
    [err_b] = conn.execute("SELECT errors FROM supervisor.jobs WHERE id = %s", (b,)).fetchone()[0]
    assert err_b["message"] == f"dependency {a} ended discarded"
    [err_c] = conn.execute("SELECT errors FROM supervisor.jobs WHERE id = %s", (c,)).fetchone()[0]
    assert err_c["message"] == f"dependency {b} ended cancelled"


def test_dependencies_already_final_decide_at_enqueue(conn, dsn):
    done, lost = enqueue("bt_step", {"name": "x"}, dsn=dsn), enqueue("bt_step", {}, dsn=dsn)
    finish(conn, [done])
    finish(conn, [lost], "cancelled")
    assert state(conn, enqueue("bt_step", {"name": "y"}, depends_on=[done], dsn=dsn)) == "available"
    held = enqueue("bt_step", {"name": "z"}, depends_on=[done, lost], dsn=dsn)
    assert state(conn, held) == "cancelled"


def test_bad_dependencies_are_refused_and_nothing_is_stored(conn, dsn):
    with pytest.raises(ValueError, match="no job 999999"):
        enqueue("bt_step", {}, depends_on=[999999], dsn=dsn)
    with pytest.raises(TypeError):
        enqueue("bt_step", {}, depends_on=5, dsn=dsn)
    with pytest.raises(ValueError):
        enqueue("bt_step", {}, depends_on=[], dsn=dsn)
    with pytest.raises(ValueError, match="run_at, delay or unique_key"):
        enqueue("bt_step", {}, depends_on=[1], delay=5, dsn=dsn)
    assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0] == 0


def test_its_last_two_dependencies_finishing_at_once_promote_it(conn, dsn):
    """Without the dependent's row lock each transaction sees the other's dependency
    unfinished and the dependent stays held for ever."""
    a, b = enqueue("bt_step", {}, dsn=dsn), enqueue("bt_step", {}, dsn=dsn)
    c = enqueue("bt_step", {}, depends_on=[a, b], dsn=dsn)
    first, second = psycopg.connect(dsn), psycopg.connect(dsn)
    try:
        finish(first, [a])
        worker = threading.Thread(target=lambda: (finish(second, [b]), second.commit()))
        worker.start()
        worker.join(0.5)
        first.commit()
        worker.join(10)
    finally:
        first.close()
        second.close()
    assert state(conn, c) == "available"


@pytest.mark.slow
def test_a_chain_runs_in_order_through_a_supervisor(dsn, tmp_path):
    log = tmp_path / "runs.log"
    a = enqueue("bt_step", {"name": "a"}, queue="bt", dsn=dsn)
    b = enqueue("bt_step", {"name": "b"}, queue="bt", depends_on=[a], dsn=dsn)
    c = enqueue("bt_step", {"name": "c"}, queue="bt", depends_on=[b], dsn=dsn)
    bad = enqueue("bt_step", {"name": "fail"}, queue="bt", dsn=dsn)
    skipped = enqueue("bt_step", {"name": "never"}, queue="bt", depends_on=[bad, c], dsn=dsn)
    sup = Supervisor(dsn, "--burst", "-q", "bt", "-n", "2", log_path=log, app="batches_handlers")
    try:
        # A step was discarded and its dependent cancelled: a failed run (issue 47).
        assert sup.wait(60) == CLI_JOBS_FAILED, sup.err
    finally:
        sup.stop()
    steps = [r["name"] for r in read_log(log) if r["event"] == "step"]
    assert [s for s in steps if s in "abc"] == ["a", "b", "c"]
    assert "never" not in steps
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert state(conn, skipped) == "cancelled"
