"""Global limits against a real PostgreSQL: the per-key claim under concurrent claimers,
slices and their expiry, the command that stores limits, and the unlimited claim
left exactly as it was."""

from __future__ import annotations

import threading

import orjson
import psycopg
import pytest
from click.testing import CliRunner
from e2e import wait_until

from shared.enqueue import enqueue, enqueue_many
from supervisor.cli.main import main
from supervisor.db import Store, read_limits, renew_lease, return_leases
from supervisor.db.claim import ClaimRequest, ClaimVariant, Shape, claim_sql, variant
from supervisor.db.leases import Slice
from supervisor.engine.leases import running_slice

pytestmark = pytest.mark.timeout(60)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def running_per_key(conn, queue: str) -> dict:
    return dict(conn.execute(
        "SELECT coalesce(concurrency_key, '-'), count(*) FROM supervisor.jobs "
        "WHERE state = 'running' AND queue = %s GROUP BY 1", (queue,)).fetchall())


@pytest.mark.parametrize("aging", ["off", "on", "mixed"])
def test_keyed_claims_from_concurrent_supervisors_never_pass_the_per_key_limit(dsn, conn,
                                                                                 aging):
    # Claimers with different kinds choose different rows of one key, so only the
    # queue's lock (not the row locks) can keep them from starting the same key twice.
    # An aged keyed claim (schema 0011) takes the same lock as a plain one ("mixed").
    for _ in range(15):
        for key in ("A", "B", "C"):
            enqueue("k1", {}, queue="kq", concurrency_key=key, dsn=dsn)
            enqueue("k2", {}, queue="kq", concurrency_key=key, dsn=dsn)
    enqueue_many("k1", [{}] * 5, queue="kq", dsn=dsn)  # no key: never limited
    start = threading.Barrier(6)
    errors = []

    def claimer(n: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as own:
                store = Store(own, f"owner-{n}", 30.0)
                aged = aging == "on" or (aging == "mixed" and n % 3 != 0)
                start.wait()
                for _ in range(15):
                    store.claim("kq", ["k1"] if n % 2 else ["k2"], 2, per_key=2,
                                aging=30.0 if aged else 0.0)
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert running_per_key(conn, "kq") == {"A": 2, "B": 2, "C": 2, "-": 5}


def test_a_key_at_its_limit_does_not_hide_the_other_keys_behind_it(dsn, conn):
    enqueue_many("k", [{}] * 200, queue="kq", concurrency_key="big", dsn=dsn)
    enqueue("k", {}, queue="kq", concurrency_key="small", dsn=dsn)  # after 200 of big
    store = Store(conn, "owner", 30.0)
    first = store.claim("kq", ["k"], 10, per_key=1)
    second = store.claim("kq", ["k"], 10, per_key=1)
    assert len(first) == 1 and len(second) == 1  # big's first, then small's
    assert running_per_key(conn, "kq") == {"big": 1, "small": 1}


def test_the_plain_claim_is_untouched_for_queues_without_a_per_key_limit():
    for aging in (0.0, 30.0):
        for shape in Shape:
            assert "claim_keyed" not in claim_sql(ClaimVariant(aging > 0, False, shape))
            assert "claim_keyed" in claim_sql(ClaimVariant(aging > 0, True, shape))
        assert not variant(ClaimRequest("q", ["k"], 5, aging), blocking=False).keyed


def test_concurrency_key_by_plain_sql(conn):
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, concurrency_key) "
                 "VALUES ('k', 'q', 'customer-7')")
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("INSERT INTO supervisor.jobs (kind, concurrency_key) VALUES ('k', '')")


def _renew(conn, owner: str, want: int, held: int, ttl: float) -> int:
    def decide(others):
        return running_slice(4, owner, want, held, others)

    return renew_lease(conn, "lq", owner, ttl, decide,
                       lambda d: Slice(d[0], want, 0.0, 0.0))[1]


def test_slices_move_between_supervisors_and_an_expired_one_is_free_again(conn):
    assert _renew(conn, "a", 4, 0, 30.0) == 4
    assert _renew(conn, "b", 4, 0, 30.0) == 0  # a holds every slot
    assert _renew(conn, "a", 4, 4, 30.0) == 2  # a runs 4: keeps them, starts no more
    assert _renew(conn, "b", 4, 0, 30.0) == 0
    assert _renew(conn, "a", 4, 1, 30.0) == 2  # its jobs ended: down to its share
    assert _renew(conn, "b", 4, 0, 30.0) == 2
    return_leases(conn, "b")
    assert _renew(conn, "a", 4, 0, 0.3) == 4  # b gave its slice back on leaving
    # a dies (stops renewing): its slice is free once its lease has run out.
    wait_until(lambda: _renew(conn, "b", 4, 0, 30.0) == 4, timeout=5, what="a's expiry")
    rows = conn.execute("SELECT owner FROM supervisor.limit_leases").fetchall()
    assert rows == [("b",)]  # the expired row was cleared on the way


def test_limit_command_sets_shows_and_clears(dsn, conn):
    result = invoke("queues", "limit", "images", "--max-running", "5", "--max-rate", "20",
                    "--burst", "4", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert "running<=5,rate<=20/s,burst=4" in result.output
    result = invoke("queues", "limit", "images", "--per-key-max-running", "1", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert read_limits(conn, ["images"])["images"].max_running == 5  # the others stay
    listed = orjson.loads(invoke("queues", "list", "--json", "--dsn", dsn).output)
    assert listed == [{"name": "images", "paused": False, "stop_running": False,
                       "available": 0, "running": 0,
                       "oldest_available": None,
                       "limits": {"max_running": 5, "max_rate": 20.0, "burst": 4,
                                  "per_key_max_running": 1}}]
    status = orjson.loads(invoke("status", "--json", "--dsn", dsn).output)
    assert status["queues"][0]["limits"]["per_key_max_running"] == 1
    assert "per-key<=1" in invoke("status", "--dsn", dsn).output
    result = invoke("queues", "limit", "images", "--max-rate", "none", "--dsn", dsn)
    assert "rate" not in result.output  # the burst went with the rate
    result = invoke("queues", "limit", "images", "--clear", "--dsn", dsn)
    assert result.exit_code == 0 and "no global limits" in result.output
    assert read_limits(conn, ["images"]) == {}


@pytest.mark.parametrize("args, message", [
    (["--max-running", "-3"], "--max-running must be a whole number >= 0"),
    (["--max-running", "'5'"], "drop the quotes"),
    (["--max-rate", "0"], "--max-rate must be more than 0"),
    (["--burst", "3"], "--burst needs a rate"),
    (["--clear", "--max-running", "2"], "--clear lifts every limit; give it alone"),
    (["--per-key-max-running", "0"], "--per-key-max-running must be a whole number from 1"),
])
def test_limit_command_refuses_bad_values_in_one_line(dsn, conn, args, message):
    result = invoke("queues", "limit", "q", *args, "--dsn", dsn)
    assert result.exit_code == 2
    assert message in result.output and result.output.count("\n") == 1, result.output
    assert read_limits(conn, ["q"]) == {}  # nothing stored


def test_plain_sql_cannot_store_a_limit_that_makes_no_sense(conn):
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("INSERT INTO supervisor.queue_limits (queue, burst) VALUES ('q', 3)")
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("INSERT INTO supervisor.queue_limits (queue, max_rate) "
                     "VALUES ('q', 'infinity')")
    with pytest.raises(psycopg.errors.InvalidTextRepresentation):
        conn.execute("INSERT INTO supervisor.queue_limits (queue, max_running) "
                     "VALUES ('q', '5 jobs')")


def test_renewal_waits_for_the_lock_not_for_a_snapshot(dsn, conn):
    """Two renewals at once: the second, blocked on the lock, must see the first's
    slice (its own statement after the lock), not the empty table its start saw."""
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("BEGIN")
        other.execute("SELECT pg_advisory_xact_lock(hashtext('supervisor.limit_leases'), "
                      "hashtext('lq'))")
        other.execute("INSERT INTO supervisor.limit_leases (queue, owner, slots, want_slots, "
                      "expires_at) VALUES ('lq', 'x', 4, 4, now() + interval '30 s')")
        got = []
        thread = threading.Thread(target=lambda: got.append(_renew(
            psycopg.connect(dsn, autocommit=True), "y", 4, 0, 30.0)))
        thread.start()
        wait_until(lambda: conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()[0] == 1, what="y waiting for the lock")
        other.execute("COMMIT")
        thread.join()
    assert got == [0]


ODD = "it's; DROP TABLE supervisor.jobs; --"


def test_odd_queue_names_and_keys_are_data(dsn, conn):
    result = invoke("queues", "limit", ODD, "--max-running", "2", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert read_limits(conn, [ODD])[ODD].max_running == 2
    keys = ["tab\there", "new\nline", "back\\slash", "ünï €", "\\N", None]
    ids = enqueue_many("k", [{}] * len(keys), queue=ODD, concurrency_keys=keys, dsn=dsn)
    stored = dict(conn.execute("SELECT id, concurrency_key FROM supervisor.jobs").fetchall())
    assert [stored[i] for i in ids] == keys  # COPY escapes them; "\\N" is not NULL
    claimed = Store(conn, "o", 30.0).claim(ODD, ["k"], 10, per_key=1)
    assert len(claimed) == len(keys)  # every key distinct, the NULL one unlimited


def test_a_keyed_claim_carries_the_jobs_trace_context_to_the_child(dsn, conn):
    # claim_keyed() (schema 0007) returns no trace_context; the statement around it must
    # still hand the producer's context on, as the plain claim does.
    carrier = '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, args, concurrency_key, "
                 "trace_context) VALUES ('k1', 'kq', '{}', 'A', %s)", (carrier,))
    claimed = Store(conn, "owner-1", 30.0).claim("kq", ["k1"], 5, per_key=1)
    assert [orjson.loads(job.trace_context) for job in claimed] == [orjson.loads(carrier)]
