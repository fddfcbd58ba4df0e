"""Batched writes that one refused row cannot stall (issue 50), against real PostgreSQL.

A row is refused by a test trigger raising the SQLSTATE of each kind of refusal the
schema can produce (22: data, 23: a CHECK, 54: an index row or tsvector past its limit)
for chosen jobs; every other row of the batch must be written at the first flush, the
refused one in a reduced form or discarded with the reason, and nothing retried. A
deadlock or a lost connection is not a refusal and still keeps the batch for a retry.
The error text of a job that fails 20 times with 65,000 characters of distinct words
stays within the error search index's limit (schema 0022's capped_errors).
"""

from __future__ import annotations

import logging
import random
import string

import psycopg
import pytest

from shared import jobs
from shared.enqueue import enqueue
from shared.usage import Usage
from supervisor.db import Attempt, Failure, Store, refused, write_apart
from supervisor.engine.outbox import Outbox
from supervisor.observe import SupervisorMetrics

REFUSALS = ["54000", "22001", "23514"]  # program limit, string too long, check violation

TRIGGER = """
CREATE TABLE public.refuse (id bigint PRIMARY KEY, code text NOT NULL,
                            state text, longer_than integer);
CREATE FUNCTION public.refuse_row() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r public.refuse;
BEGIN
    SELECT * INTO r FROM public.refuse WHERE id = NEW.id;
    IF FOUND AND (r.state IS NULL OR r.state = NEW.state)
       AND (r.longer_than IS NULL OR octet_length(NEW.errors::text) > r.longer_than) THEN
        RAISE EXCEPTION 'refused for the test (job %)', NEW.id USING ERRCODE = r.code;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER refuse BEFORE UPDATE ON supervisor.jobs
    FOR EACH ROW EXECUTE FUNCTION public.refuse_row();
"""


class Direct:
    """``Database.call`` on one store, errors raised."""

    up = True

    def __init__(self, store: Store) -> None:
        self.store = store

    def call(self, what, default, operation="query"):
        return what(self.store)


@pytest.fixture
def parts(conn):
    conn.execute(TRIGGER)
    store = Store(conn, "me")
    return store, Outbox(SupervisorMetrics("me", version="1"), 0.01), Direct(store)


def refuse(conn, job_id, code, state=None, longer_than=None):
    conn.execute("INSERT INTO public.refuse VALUES (%s, %s, %s, %s)",
                 (job_id, code, state, longer_than))


def claim(conn, store, n, kind="k"):
    for _ in range(n):
        enqueue(kind, conn=conn)
    return store.claim("default", [kind], n)


def row(conn, job_id):
    return conn.execute("SELECT state, attempt, errors, lease_owner FROM supervisor.jobs "
                        "WHERE id = %s", (job_id,)).fetchone()


def fail(outbox, job, message="boom", traceback=None, **kw):
    outbox.failed(job, kw.pop("kind", jobs.FAIL_ERROR), message, traceback,
                  kw.pop("retry_delay", 30.0), kw.pop("terminal", False), 0.0, **kw)


@pytest.mark.parametrize("code", REFUSALS)
def test_a_refused_failure_is_written_cut_and_every_other_row_at_once(conn, parts, code,
                                                                     caplog):
    store, outbox, db = parts
    held = claim(conn, store, 6)
    bad = held[2]
    refuse(conn, bad.id, code, longer_than=9000)  # the full entry, not the cut one
    for job in held:
        fail(outbox, job, ("x" * 9000) if job is bad else f"plain {job.id}",
             traceback="Traceback\n" + "  frame\n" * 2000)
    with caplog.at_level(logging.WARNING, logger="supervisor.store"):
        outbox.flush(db, 0.0)
    assert outbox.count() == 0  # nothing left to retry
    for job in held:
        state, _, errors, owner = row(conn, job.id)
        assert (state, owner, len(errors)) == ("retryable", None, 1), errors
        if job is not bad:
            assert errors[0]["message"] == f"plain {job.id}"
    message = row(conn, bad.id)[2][0]["message"]
    assert message.startswith("x" * 1024) and len(message) < 1300
    assert "[cut: the database refused the full entry" in message
    assert "refused for the test" in message
    assert sum("refused its failure" in r.getMessage() for r in caplog.records) == 1


def test_a_failure_refused_even_cut_discards_its_job_with_the_reason(conn, parts):
    store, outbox, db = parts
    good, bad = claim(conn, store, 2)
    refuse(conn, bad.id, "54000", state="retryable")  # any retryable write of it
    fail(outbox, good)
    fail(outbox, bad)
    outbox.flush(db, 0.0)
    assert row(conn, good.id)[0] == "retryable"
    state, _, errors, _ = row(conn, bad.id)
    assert state == "discarded"
    assert errors[-1]["message"].startswith("its failure could not be stored (refused for "
                                            "the test")
    assert outbox.count() == 0


def test_a_row_refused_whatever_is_left_to_its_lease_and_holds_up_nothing(conn, parts,
                                                                         caplog):
    store, outbox, db = parts
    held = claim(conn, store, 5)
    bad = held[0]
    refuse(conn, bad.id, "54000")  # every write of it
    for job in held:
        fail(outbox, job)
    with caplog.at_level(logging.ERROR, logger="supervisor.outbox"):
        outbox.flush(db, 0.0)
    assert outbox.count() == 0
    assert row(conn, bad.id)[0] == "running"  # its lease expires; rescue takes it
    assert [row(conn, j.id)[0] for j in held[1:]] == ["retryable"] * 4
    assert any("no outcome could be written" in r.getMessage() for r in caplog.records)


def test_a_refused_completion_discards_its_job_and_the_others_complete(conn, parts):
    store, outbox, db = parts
    held = claim(conn, store, 4)
    bad = held[1]
    refuse(conn, bad.id, "54000", state="completed")
    for job in held:
        outbox.completed(job, '"done"', 0.0)
    outbox.flush(db, 0.0)
    assert [row(conn, j.id)[0] for j in held] == [
        "completed", "discarded", "completed", "completed"]
    errors = row(conn, bad.id)[2]
    assert errors[-1]["kind"] == jobs.FAIL_RESULT
    assert "result could not be stored: refused for the test" in errors[-1]["message"]


def test_absurd_usage_is_dropped_from_a_refused_failure(conn, parts):
    """A real refusal, no trigger: a peak memory past bigint fails the cast."""
    store, outbox, db = parts
    good, bad = claim(conn, store, 2)
    fail(outbox, good, usage=Usage(0.1, 0.2, 1000))
    fail(outbox, bad, usage=Usage(0.1, 0.2, 10**30))
    outbox.flush(db, 0.0)
    assert row(conn, good.id)[2][0]["usage"]["max_rss_bytes"] == 1000
    errors = row(conn, bad.id)[2]
    assert row(conn, bad.id)[0] == "retryable" and "usage" not in errors[0]
    assert "bigint out of range" in errors[0]["message"]


WRITES = ["interrupt", "snooze", "release", "expire", "progress", "start"]


@pytest.mark.parametrize("write", WRITES)
def test_every_batched_write_survives_a_refused_row(conn, parts, write):
    store, outbox, db = parts
    held = claim(conn, store, 4)
    bad = held[3]
    refuse(conn, bad.id, "54000")
    for job in held:
        if write == "interrupt":
            outbox.failed(job, jobs.FAIL_SHUTDOWN, "drain", None, None, False, 0.0)
        elif write == "snooze":
            outbox.failed(job, jobs.FAIL_SNOOZE, "later", None, 60.0, False, 0.0)
        elif write == "release":
            outbox.released([job], 0.0)
        elif write == "expire":
            outbox.expired(job, 0.0)
        elif write == "progress":
            outbox.progressed(job, {"done": 1})
        else:
            outbox.started(job, 0.0)
    outbox.flush(db, 10.0, last_chance=True)  # last_chance: every start is written
    assert outbox.count() == 0 and not outbox.pending.starts
    expected = {"interrupt": ("available", 0), "snooze": ("scheduled", 0),
                "release": ("available", 0), "expire": ("expired", 0),
                "progress": ("running", 1), "start": ("running", 1)}[write]
    for job in held[:3]:
        assert row(conn, job.id)[:2] == expected
    column = {"progress": "progress IS NOT NULL", "start": "attempted_at IS NOT NULL"}
    if write in column:
        written = conn.execute(f"SELECT id FROM supervisor.jobs WHERE {column[write]}")
        assert {r[0] for r in written} == {j.id for j in held[:3]}
    assert row(conn, bad.id)[0] == "running"


def test_a_deadlock_is_not_a_refusal_and_the_batch_is_kept(conn, parts):
    store, outbox, db = parts
    held = claim(conn, store, 3)
    refuse(conn, held[1].id, "40P01")
    for job in held:
        fail(outbox, job)
    with pytest.raises(psycopg.errors.DeadlockDetected):
        outbox.flush(db, 0.0)
    assert len(outbox.pending.failures) == 3  # kept whole for the next try
    conn.execute("DELETE FROM public.refuse")
    outbox.flush(db, 1.0)
    assert [row(conn, j.id)[0] for j in held] == ["retryable"] * 3


def test_write_apart_splits_only_for_refusals(conn, parts):
    store, _, _ = parts
    held = claim(conn, store, 8)
    refuse(conn, held[5].id, "22001")
    items = [Attempt(j.id, j.attempt) for j in held]
    apart = write_apart(items, store.release)
    assert [item for item, _ in apart.refused] == [items[5]]
    assert apart.fenced == []
    assert apart.statements <= 1 + 2 * 3  # log2(8) levels, two halves each
    assert [row(conn, j.id)[0] for j in held].count("available") == 7


def test_what_counts_as_refused():
    assert refused(psycopg.errors.ProgramLimitExceeded())
    assert refused(psycopg.errors.CheckViolation())
    assert refused(psycopg.errors.StringDataRightTruncation())
    assert refused(psycopg.DataError("PostgreSQL text fields cannot contain NUL"))
    assert not refused(psycopg.errors.DeadlockDetected())
    assert not refused(psycopg.errors.QueryCanceled())
    assert not refused(psycopg.errors.AdminShutdown())
    assert not refused(psycopg.OperationalError("connection lost"))
    assert not refused(ValueError("not a database error"))


def words(count: int, seed: int) -> str:
    rng = random.Random(seed)
    text = []
    size = 0
    while size < count:
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 10)))
        text.append(word)
        size += len(word) + 1
    return " ".join(text)[:count]


def test_twenty_wordy_failures_keep_the_errors_within_the_search_index(conn, parts):
    """The tester's job: 20 attempts, each failing with 65,000 characters of distinct
    words. Before schema 0022 the 12th failure's tsvector passed 1 MB and its write was
    refused for ever; now every write succeeds and the first and last attempts keep
    their text."""
    store, outbox, db = parts
    job_id = enqueue("wordy", max_attempts=20, conn=conn)
    messages = {}
    for attempt in range(1, 21):
        conn.execute("UPDATE supervisor.jobs SET run_at = now() WHERE id = %s", (job_id,))
        store.promote_due()
        [job] = store.claim("default", ["wordy"], 1)
        assert job.attempt == attempt
        messages[attempt] = words(65000, attempt)
        fail(outbox, job, messages[attempt], traceback="Traceback\n" + "frame\n" * 20000,
             retry_delay=0.0)
        outbox.flush(db, float(attempt))
        assert outbox.count() == 0
        assert row(conn, job_id)[1] == attempt
    state, _, errors, _ = row(conn, job_id)
    assert state == "discarded" and len(errors) == 20
    assert [e["attempt"] for e in errors] == list(range(1, 21))
    # Cut per attempt (its start and end kept), then never again.
    assert len(errors[0]["message"]) <= jobs.MESSAGE_LIMIT
    assert errors[0]["message"].startswith(messages[1][:8000])
    assert "trimmed" not in errors[0] and "trimmed" not in errors[-1]
    assert errors[-1]["message"].endswith(messages[20][-100:])
    assert all(e.get("trimmed") for e in errors[1:-1])
    total, tsvector = conn.execute(
        "SELECT (SELECT sum(length(e->>'message')) FROM jsonb_array_elements(errors) e),"
        " pg_column_size(to_tsvector('simple', jsonb_path_query_array(errors, "
        "'$[*].message'))) FROM supervisor.jobs WHERE id = %s", (job_id,)).fetchone()
    assert total <= jobs.ERRORS_MESSAGE_BUDGET
    assert tsvector < 1048575


def test_capped_errors_drops_the_oldest_of_very_many_and_says_so(conn):
    entries = [{"attempt": n, "kind": "error", "message": "m" * 400, "traceback": None}
               for n in range(1, 1001)]
    import orjson
    capped = conn.execute("SELECT supervisor.capped_errors(%s::jsonb)",
                          (orjson.dumps(entries).decode(),)).fetchone()[0]
    assert capped[0]["attempt"] == 1 and capped[-1]["attempt"] == 1000
    assert capped[1]["kind"] == "trimmed" and "398 earlier attempts" in capped[1]["message"]
    assert sum(len(e["message"]) for e in capped) <= jobs.ERRORS_MESSAGE_BUDGET
    small = [{"attempt": 1, "kind": "error", "message": "boom", "traceback": None}]
    assert conn.execute("SELECT supervisor.capped_errors(%s::jsonb)",
                        (orjson.dumps(small).decode(),)).fetchone()[0] == small


def test_failure_record_keeps_its_fields_when_reduced():
    from supervisor.engine.outbox import reduced

    failure = Failure(7, 3, jobs.FAIL_ERROR, "m" * 5000, "t" * 9000, 2.5, False,
                      Usage(1.0, 2.0, 3), "printed", 0.4, "k")
    cut = reduced(failure, psycopg.errors.ProgramLimitExceeded("too long"))
    assert (cut.id, cut.attempt, cut.kind, cut.retry_delay, cut.terminal, cut.ran,
            cut.job_kind) == (7, 3, jobs.FAIL_ERROR, 2.5, False, 0.4, "k")
    assert cut.usage is None and cut.output is None
    assert len(cut.message) < 1200 and cut.message.endswith("refused the full entry: "
                                                            "too long]")
    assert len(cut.traceback or "") < 4200
