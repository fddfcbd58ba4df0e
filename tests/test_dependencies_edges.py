"""Results along edges against real PostgreSQL (issue 42, schema 0028): edges that allow
their dependency to fail, named edges read back with results, ``depends_on`` in
``enqueue_many`` (with and without a batch) and in the async forms, a batch's error
callback, a pause that leaves dependency-held members alone, and an edge to a job that
does not exist refused in the producer's transaction with nothing written."""

import asyncio

import psycopg
import pytest

from shared.batches import Callback
from shared.batches_actions import pause, resume
from shared.dependencies import Dep, read_dependencies
from shared.enqueue import enqueue, enqueue_many
from shared.producers.aio import enqueue_async, enqueue_many_async

pytestmark = [pytest.mark.timeout(60)]


def finish(conn, ids, state="completed", result=None):
    conn.execute("UPDATE supervisor.jobs SET state = %s, finished_at = now(), "
                 "result = %s::jsonb WHERE id = ANY(%s)",
                 (state, None if result is None else psycopg.types.json.Json(result),
                  list(ids)))


def state(conn, job_id):
    return conn.execute("SELECT state FROM supervisor.jobs WHERE id = %s",
                        (job_id,)).fetchone()[0]


def states(conn, ids):
    return dict(conn.execute("SELECT state, count(*) FROM supervisor.jobs "
                             "WHERE id = ANY(%s) GROUP BY state", (list(ids),)).fetchall())


def count_jobs(conn):
    return conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0]


def test_an_edge_that_allows_failure_runs_the_dependent_anyway(conn, dsn):
    a, b = enqueue("e_step", {}, dsn=dsn), enqueue("e_step", {}, dsn=dsn)
    anyway = enqueue("e_step", {}, depends_on=[Dep(a, allow_failure=True), b], dsn=dsn)
    strict = enqueue("e_step", {}, depends_on=[a, b], dsn=dsn)
    finish(conn, [a], "discarded")
    assert (state(conn, anyway), state(conn, strict)) == ("scheduled", "cancelled")
    finish(conn, [b])
    assert state(conn, anyway) == "available"
    # Decided at enqueue when the dependency already failed: allowed runs, strict cancels.
    assert state(conn, enqueue("e_step", {}, depends_on=[Dep(a, allow_failure=True)],
                               dsn=dsn)) == "available"
    assert state(conn, enqueue("e_step", {}, depends_on=[a], dsn=dsn)) == "cancelled"
    # An edge's allowance is its own: failing a strict dependency still cancels.
    c, d = enqueue("e_step", {}, dsn=dsn), enqueue("e_step", {}, dsn=dsn)
    mixed = enqueue("e_step", {}, depends_on=[Dep(c, allow_failure=True), d], dsn=dsn)
    finish(conn, [d], "expired")
    assert state(conn, mixed) == "cancelled"


def test_a_dependency_failing_before_the_producer_commits_is_allowed_at_commit(conn, dsn):
    a = enqueue("e_step", {}, dsn=dsn)
    with psycopg.connect(dsn) as producer:
        held = enqueue("e_step", {}, depends_on=[Dep(a, allow_failure=True)], conn=producer)
        strict = enqueue("e_step", {}, depends_on=[a], conn=producer)
        finish(conn, [a], "discarded")  # before the producer's commit
        producer.commit()
    assert (state(conn, held), state(conn, strict)) == ("available", "cancelled")


def test_named_edges_are_read_back_with_results_and_errors(conn, dsn):
    split = enqueue("e_split", {}, dsn=dsn)
    side = enqueue("e_side", {}, dsn=dsn)
    merge = enqueue("e_merge", {}, depends_on={"split": split,
                                               "side": Dep(side, allow_failure=True)}, dsn=dsn)
    finish(conn, [split], result={"parts": ["a", "b"]})
    conn.execute("UPDATE supervisor.jobs SET state = 'discarded', finished_at = now(), "
                 "errors = '[{\"message\": \"first\"}, {\"message\": \"boom\"}]' "
                 "WHERE id = %s", (side,))
    assert state(conn, merge) == "available"
    by_name = {d.name: d for d in read_dependencies(conn, merge)}
    assert by_name["split"].id == split and by_name["split"].ok
    assert by_name["split"].result == {"parts": ["a", "b"]} and by_name["split"].kind == "e_split"
    assert by_name["side"].state == "discarded" and not by_name["side"].ok
    assert by_name["side"].error == {"message": "boom"}
    # A pruned dependency still shows, as gone.
    conn.execute("DELETE FROM supervisor.jobs WHERE id = %s", (split,))
    gone = [d for d in read_dependencies(conn, merge) if d.id == split]
    assert gone[0].state is None and gone[0].name == "split"
    assert read_dependencies(conn, split + 10_000) == []


def test_enqueue_many_holds_every_member_on_its_dependencies(conn, dsn):
    a = enqueue("e_step", {}, dsn=dsn)
    ids = enqueue_many("e_step", [{"n": i} for i in range(2500)], depends_on=[a], dsn=dsn)
    assert states(conn, ids) == {"scheduled": 2500}
    finish(conn, [a])
    assert states(conn, ids) == {"available": 2500}
    # A dependency that failed: members held on a strict edge are cancelled; named edges
    # are written on every member.
    b = enqueue("e_step", {}, dsn=dsn)
    more = enqueue_many("e_step", [{}, {}], depends_on={"b": b}, dsn=dsn)
    assert [d.name for d in read_dependencies(conn, more[1])] == ["b"]
    finish(conn, [b], "cancelled")
    assert states(conn, more) == {"cancelled": 2}
    # All done already: available at once, no edge written.
    done = enqueue_many("e_step", [{}], depends_on=[a], dsn=dsn)
    assert state(conn, done[0]) == "available"
    assert conn.execute("SELECT count(*) FROM supervisor.job_dependencies").fetchone()[0] == 0


def test_a_batch_waiting_on_a_failed_dependency_closes_with_its_error_callback(conn, dsn):
    a = enqueue("e_step", {}, dsn=dsn)
    finish(conn, [a], "discarded")
    batch = enqueue_many("e_step", [{}, {}, {}], depends_on=[a], dsn=dsn,
                         then=Callback("e_then", {}), on_failure=Callback("e_failed", {"x": 1}))
    assert states(conn, batch.ids) == {"cancelled": 3}  # settled at the producer's commit
    summary = batch.summary()
    assert summary.finished and summary.called_on_failure
    assert conn.execute("SELECT kind, args FROM supervisor.jobs WHERE id = %s",
                        (summary.callback_id,)).fetchone() == ("e_failed", {"x": 1})


def test_on_failure_runs_instead_of_then_only_when_a_member_did_not_complete(conn, dsn):
    good = enqueue_many("e_step", [{}, {}], then=Callback("e_then", {}),
                        on_failure=Callback("e_failed", {}), dsn=dsn)
    bad = enqueue_many("e_step", [{}, {}], then=Callback("e_then", {}),
                       on_failure=Callback("e_failed", {}), dsn=dsn)
    only_failure = enqueue_many("e_step", [{}], on_failure=Callback("e_failed", {}), dsn=dsn)
    finish(conn, good.ids)
    finish(conn, bad.ids[:1])
    finish(conn, bad.ids[1:], "discarded")
    finish(conn, only_failure.ids)

    def kind_of(batch):
        cb = batch.summary().callback_id
        return cb and conn.execute("SELECT kind FROM supervisor.jobs WHERE id = %s",
                                   (cb,)).fetchone()[0]
    assert (kind_of(good), kind_of(bad), kind_of(only_failure)) == ("e_then", "e_failed", None)
    assert only_failure.summary().finished
    # A batch without on_failure calls `then` whatever its members did, as before.
    plain = enqueue_many("e_step", [{}], then=Callback("e_then", {}), dsn=dsn)
    finish(conn, plain.ids, "discarded")
    assert kind_of(plain) == "e_then" and not plain.summary().called_on_failure
    # A cancelled batch (all members final by the cancel) calls on_failure too.
    stopped = enqueue_many("e_step", [{}], then=Callback("e_then", {}),
                           on_failure=Callback("e_failed", {}), dsn=dsn)
    stopped.cancel()
    assert kind_of(stopped) == "e_failed"


def test_a_pause_leaves_members_held_for_dependencies_held(conn, dsn):
    a = enqueue("e_step", {}, dsn=dsn)
    batch = enqueue_many("e_step", [{}, {}], depends_on=[a], then=Callback("e_then", {}),
                         dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as actor:
        pause(actor, batch.id)
        resume(actor, batch.id)
    assert states(conn, batch.ids) == {"scheduled": 2}  # not released by the resume
    finish(conn, [a])
    assert states(conn, batch.ids) == {"available": 2}


def test_the_async_forms_take_depends_on(conn, dsn):
    a = enqueue("e_step", {}, dsn=dsn)

    async def go():
        one = await enqueue_async("e_step", {}, depends_on=[a], dsn=dsn)
        many = await enqueue_many_async("e_step", [{}, {}], depends_on=[Dep(a, name="a")],
                                        dsn=dsn)
        return one, many
    one, many = asyncio.run(go())
    assert states(conn, [one, *many]) == {"scheduled": 3}
    finish(conn, [a])
    assert states(conn, [one, *many]) == {"available": 3}


@pytest.mark.parametrize("make", [
    lambda dsn, conn: enqueue("e_step", {}, depends_on=[999_999], conn=conn),
    lambda dsn, conn: enqueue_many("e_step", [{}, {}], depends_on=[999_999], conn=conn),
    lambda dsn, conn: enqueue_many("e_step", [{}], depends_on={"x": Dep(999_999)}, conn=conn,
                                   then=Callback("e_then", {})),
    lambda dsn, conn: asyncio.run(enqueue_async("e_step", {}, depends_on=[999_999], dsn=dsn)),
])
def test_an_edge_to_no_job_is_refused_in_the_producers_transaction(conn, dsn, make):
    a = enqueue("e_step", {}, dsn=dsn)
    before = count_jobs(conn)
    with psycopg.connect(dsn) as producer:
        enqueue("e_step", {}, depends_on=[a], conn=producer)  # the caller's own work
        with pytest.raises(ValueError, match="depends_on: no job 999999"):
            make(dsn, producer)
        producer.rollback()
    assert count_jobs(conn) == before
    assert conn.execute("SELECT count(*) FROM supervisor.batches").fetchone()[0] == 0


@pytest.mark.parametrize("depends_on, error", [
    ([Dep(1, allow_failure="yes")], "allow_failure must be True or False"),
    ({"": 1}, "names must be non-empty str"),
    ([Dep(1, name="a"), Dep(2, name="a")], "names 'a' twice"),
    ([Dep(0)], "non-empty list of job ids"),
    ({}, "non-empty list"),
])
def test_bad_edges_are_refused_before_the_database(depends_on, error):
    with pytest.raises((TypeError, ValueError), match=error):
        enqueue("e_step", {}, depends_on=depends_on,
                dsn="postgresql://nobody@127.0.0.1:1/nowhere")


def test_the_command_line_enqueues_with_edges(conn, dsn):
    from click.testing import CliRunner

    from supervisor.cli.main import main

    a = enqueue("e_step", {}, dsn=dsn)
    run = CliRunner().invoke(main, ["enqueue", "e_merge", "--depends-on", f"split={a}",
                                    "--allow-failure", "--dsn", dsn])
    assert run.exit_code == 0, run.output
    held = int(run.output.strip())
    assert state(conn, held) == "scheduled"
    finish(conn, [a], "discarded")
    assert state(conn, held) == "available"
    assert [d.name for d in read_dependencies(conn, held)] == ["split"]
    for bad, says in ((["--depends-on", "x"], "takes a job id"),
                      (["--allow-failure"], "needs --depends-on"),
                      (["--depends-on", "999999"], "no job 999999")):
        refused = CliRunner().invoke(main, ["enqueue", "e_step", *bad, "--dsn", dsn])
        assert refused.exit_code != 0 and says in refused.output, refused.output
        assert "Traceback" not in refused.output
