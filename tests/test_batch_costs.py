"""Cost roll-ups (issue 42): what a batch's members and a concurrency key's jobs cost,
every attempt counted once (a failed attempt's usage in its errors entry, a completed
job's last attempt in ``usage``), read by ``Batch.summary().cost``, ``supervisor batches
show`` and ``supervisor status --keys``; hand-written usages that are not measures are
left out instead of failing the roll-up; and through a real supervisor, a batch whose
members spin known CPU and fail once each."""

import json

import orjson
import pytest
from click.testing import CliRunner
from e2e import Supervisor

from shared.batches import Callback
from shared.costs import batch_cost, key_costs
from shared.enqueue import enqueue_many
from supervisor.cli.main import main

pytestmark = [pytest.mark.timeout(120)]

MIB = 1 << 20


def usage(cpu, wall, rss):
    return {"cpu_seconds": cpu, "wall_seconds": wall, "max_rss_bytes": rss}


def set_row(conn, job_id, state, attempt, used=None, errors=(), key=None):
    conn.execute("UPDATE supervisor.jobs SET state = %s, attempt = %s, usage = %s::jsonb, "
                 "errors = %s::jsonb, concurrency_key = %s, "
                 "finished_at = CASE WHEN %s IN ('completed', 'discarded', 'cancelled') "
                 "THEN now() END WHERE id = %s",
                 (state, attempt, None if used is None else orjson.dumps(used).decode(),
                  orjson.dumps([{"attempt": i + 1, "message": "boom", **(
                      {"usage": u} if u is not None else {})} for i, u in enumerate(errors)]
                  ).decode(), key, state, job_id))


def test_every_attempt_counts_once(conn, dsn):
    batch = enqueue_many("c_member", [{}] * 5, then=Callback("c_done", {}), dsn=dsn)
    a, b, c, d, e = batch.ids
    # a: failed once (measured), then completed
    set_row(conn, a, "completed", 2, usage(2.0, 3.0, 100 * MIB), [usage(1.0, 1.5, 90 * MIB)])
    # b: discarded after two measured attempts; its usage repeats the last entry's
    last = usage(4.0, 4.0, 300 * MIB)
    set_row(conn, b, "discarded", 2, last, [usage(1.0, 1.0, 80 * MIB), last])
    # c: cancelled before it ever started
    set_row(conn, c, "cancelled", 0)
    # d: killed by its parent (no usage), then completed
    set_row(conn, d, "completed", 2, usage(0.5, 0.5, 50 * MIB), [None])
    # e: still running its first attempt
    set_row(conn, e, "running", 1)
    cost = batch_cost(conn, batch.id)
    assert (cost.jobs, cost.attempts, cost.retries, cost.measured) == (5, 7, 3, 5)
    assert cost.cpu_seconds == pytest.approx(2.0 + 1.0 + 1.0 + 4.0 + 0.5)
    assert cost.wall_seconds == pytest.approx(3.0 + 1.5 + 1.0 + 4.0 + 0.5)
    assert cost.peak_rss_max == 300 * MIB
    assert 100 * MIB < cost.peak_rss_p95 <= 300 * MIB
    assert batch.summary().cost == cost
    assert "2 not measured" in cost.describe() and "7 attempts (3 retries)" in cost.describe()

    shown = CliRunner().invoke(main, ["batches", "show", str(batch.id), "--dsn", dsn])
    assert shown.exit_code == 0, shown.output
    assert "cost:     8.5 CPU-s, 10.0 wall-s, peak memory p95" in shown.output
    as_json = CliRunner().invoke(main, ["batches", "show", str(batch.id), "--json",
                                       "--dsn", dsn])
    assert json.loads(as_json.output)["cost"]["attempts"] == 7


def test_a_hand_written_usage_is_left_out_not_fatal(conn, dsn):
    batch = enqueue_many("c_member", [{}, {}], then=Callback("c_done", {}), dsn=dsn)
    set_row(conn, batch.ids[0], "completed", 1, {"cpu_seconds": "lots", "wall_seconds": -1,
                                                 "max_rss_bytes": 1e30})
    set_row(conn, batch.ids[1], "completed", 1, usage(1.5, 2.0, MIB))
    cost = batch_cost(conn, batch.id)
    assert (cost.attempts, cost.measured) == (2, 2)
    assert (cost.cpu_seconds, cost.wall_seconds, cost.peak_rss_max) == (1.5, 2.0, MIB)


def test_per_concurrency_key_over_the_last_day(conn, dsn):
    ids = enqueue_many("c_member", [{}] * 4, dsn=dsn)
    set_row(conn, ids[0], "completed", 1, usage(1.0, 1.0, MIB), key="customer-1")
    set_row(conn, ids[1], "completed", 3, usage(2.0, 2.0, 2 * MIB),
            [usage(1.0, 1.0, MIB), usage(1.0, 1.0, MIB)], key="customer-1")
    set_row(conn, ids[2], "completed", 1, usage(5.0, 5.0, MIB), key="customer-2")
    set_row(conn, ids[3], "completed", 1, usage(9.0, 9.0, MIB))  # no key: not rolled up
    conn.execute("UPDATE supervisor.jobs SET finished_at = now() - interval '2 days' "
                 "WHERE id = %s", (ids[2],))
    costs = key_costs(conn, 86400.0)
    assert list(costs) == ["customer-1"]  # customer-2's job finished before the window
    one = costs["customer-1"]
    assert (one.jobs, one.attempts, one.retries, one.cpu_seconds) == (2, 4, 2, 5.0)
    shown = CliRunner().invoke(main, ["status", "--keys", "--dsn", dsn])
    assert shown.exit_code == 0, shown.output
    assert "customer-1" in shown.output and "customer-2" not in shown.output
    as_json = json.loads(CliRunner().invoke(main, ["status", "--keys", "--json",
                                                   "--dsn", dsn]).output)
    assert as_json["keys"][0]["key"] == "customer-1" and as_json["keys"][0]["retries"] == 2


@pytest.mark.slow
def test_a_real_batch_rolls_up_what_its_members_spent(dsn):
    args = [{"seconds": 0.2, "fail_first": i % 2 == 0} for i in range(6)]
    batch = enqueue_many("costs_spin", args, queue="costs", dsn=dsn,
                         then=Callback("costs_done", {}, queue="costs"))
    sup = Supervisor(dsn, "-n", "2", "--burst", "--discards-ok", app="costs_handlers")
    try:
        assert sup.wait(timeout=100) == 0, sup.err
    finally:
        sup.stop()
    cost = batch.summary().cost
    assert (cost.jobs, cost.attempts, cost.retries, cost.measured) == (6, 9, 3, 9)
    assert cost.cpu_seconds >= 9 * 0.2 * 0.9  # each attempt spun 0.2 s of its own CPU
    assert cost.wall_seconds >= cost.cpu_seconds * 0.5
    assert cost.peak_rss_p95 is not None and cost.peak_rss_p95 > MIB
