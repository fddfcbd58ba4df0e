"""Traces across the pipe (issue 15): a job enqueued under a span is claimed, run and
settled by a real supervisor whose --app module configures an SDK tracer provider that
writes every span to a file (tests/tracing_handlers.py); the test reads the spans of
the parent and of the child from there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from e2e import Supervisor, job_row, read_log
from tracing_support import memory_tracer

import supervisor

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # real supervisors: CI lane


@pytest.fixture
def producer_tracer():
    """A tracer of the test process (the producer), not installed globally."""
    with memory_tracer("test-producer") as pair:
        yield pair


def burst(dsn: str, trace_file: Path, *args: str):
    """A --burst run of the tracing handlers; returns it once it exited 0."""
    sup = Supervisor(dsn, "--burst", "-n", "2", "-q", "traced", *args,
                     env={"TRACE_FILE": str(trace_file)}, app="tracing_handlers")
    code = sup.wait(60)
    assert code == 0, f"exit {code}\nstderr:\n{sup.err}"
    return sup


def process_spans(spans: list[dict], job_id: int) -> list[dict]:
    return [s for s in spans if s["name"].startswith("process ")
            and s["attributes"].get("messaging.message.id") == str(job_id)]


def links_to(spans: list[dict], job_id: int) -> list[tuple[dict, dict]]:
    return [(s, link) for s in spans for link in s["links"]
            if link["attributes"].get("messaging.message.id") == str(job_id)]


def test_one_trace_from_enqueue_through_the_claim_into_the_child(dsn, tmp_path,
                                                                 producer_tracer):
    tracer, exporter = producer_tracer
    trace_file = tmp_path / "spans.jsonl"
    with tracer.start_as_current_span("web request"):
        job_id = supervisor.enqueue("traced_ok", {"n": 7}, queue="traced", dsn=dsn)
    [request] = exporter.get_finished_spans()
    trace_id = f"{request.context.trace_id:032x}"
    request_span = f"{request.context.span_id:016x}"
    stored = job_row(dsn, job_id)["trace_context"]
    assert stored["traceparent"].startswith(f"00-{trace_id}-{request_span}-")

    sup = burst(dsn, trace_file)
    assert job_row(dsn, job_id)["state"] == "completed"
    spans = read_log(trace_file)

    # The child continued the producer's trace: its span's parent is the request span.
    [run] = process_spans(spans, job_id)
    assert run["pid"] != sup.pid
    assert run["name"] == "process traced_ok" and run["kind"] == "CONSUMER"
    assert (run["trace_id"], run["parent_id"]) == (trace_id, request_span)
    assert run["attributes"] == {
        "messaging.system": "pg-supervisor", "messaging.operation.type": "process",
        "messaging.operation.name": "process", "messaging.destination.name": "traced",
        "messaging.message.id": str(job_id), "pg_supervisor.job.kind": "traced_ok",
        "pg_supervisor.job.attempt": 1, "pg_supervisor.job.max_attempts": 20,
    }
    assert run["status"] == "UNSET" and run["events"] == []

    # The parent's claim that took it links to the same trace, and so does the write
    # that completed it (carried on a claim, or the outbox's settle).
    taken = [(s, link) for s, link in links_to(spans, job_id)
             if s["name"] == "receive traced" and "pg_supervisor.write" not in link["attributes"]]
    [(claim, link)] = taken
    assert claim["pid"] == sup.pid and claim["parent_id"] is None
    assert (link["trace_id"], link["span_id"]) == (trace_id, request_span)
    assert claim["attributes"]["messaging.batch.message_count"] == 1
    assert claim["attributes"]["messaging.destination.name"] == "traced"
    assert claim["start"] <= run["start"] and run["end"] >= run["start"]
    written = [(s, link) for s, link in links_to(spans, job_id)
               if "pg_supervisor.write" in link["attributes"]]
    assert len(written) == 1, written
    assert written[0][1]["trace_id"] == trace_id
    assert written[0][0]["start"] >= run["end"] - 1_000_000  # after the handler ended


def test_a_failing_handler_records_its_exception_and_error_status(dsn, tmp_path,
                                                                  producer_tracer):
    tracer, _ = producer_tracer
    trace_file = tmp_path / "spans.jsonl"
    with tracer.start_as_current_span("web request"):
        job_id = supervisor.enqueue("traced_fail", {"message": "no <b>such</b> file"},
                                    queue="traced", dsn=dsn)
    burst(dsn, trace_file, "--discards-ok")  # the discard is the point here
    row = job_row(dsn, job_id)
    assert row["state"] == "discarded"
    [run] = process_spans(read_log(trace_file), job_id)
    assert run["status"] == "ERROR"
    assert run["description"] == "ValueError: no <b>such</b> file"
    assert run["attributes"]["pg_supervisor.job.failure"] == "error"
    [event] = run["events"]
    assert event["name"] == "exception"
    assert event["attributes"]["exception.type"] == "ValueError"
    assert event["attributes"]["exception.message"] == "no <b>such</b> file"
    # The very traceback the job's errors keep.
    assert event["attributes"]["exception.stacktrace"] == row["errors"][0]["traceback"]
    assert "raise ValueError(message)" in event["attributes"]["exception.stacktrace"]


def test_a_snooze_is_not_an_error(dsn, tmp_path):
    trace_file = tmp_path / "spans.jsonl"
    job_id = supervisor.enqueue("traced_snooze", queue="traced", dsn=dsn)
    burst(dsn, trace_file)
    assert job_row(dsn, job_id)["state"] == "scheduled"
    [run] = process_spans(read_log(trace_file), job_id)
    assert run["status"] == "UNSET"
    assert [e["name"] for e in run["events"]] == ["snooze"]


def test_jobs_without_a_usable_context_run_under_fresh_root_spans(dsn, conn, tmp_path):
    trace_file = tmp_path / "spans.jsonl"
    plain = conn.execute("INSERT INTO supervisor.jobs (kind, queue, args) "
                         "VALUES ('traced_ok', 'traced', '{\"n\": 1}') RETURNING id").fetchone()[0]
    carriers = [{"traceparent": "not a traceparent"}, {"traceparent": 5, "tracestate": []},
                {"traceparent": "00-" + "0" * 32 + "-" + "1" * 16 + "-01"}, {}]
    odd = [conn.execute("INSERT INTO supervisor.jobs (kind, queue, args, trace_context) "
                        "VALUES ('traced_ok', 'traced', '{\"n\": 2}', %s) RETURNING id",
                        (json.dumps(c),)).fetchone()[0] for c in carriers]
    burst(dsn, trace_file)
    spans = read_log(trace_file)
    trace_ids = set()
    for job_id in [plain, *odd]:
        assert job_row(dsn, job_id)["state"] == "completed"
        [run] = process_spans(spans, job_id)
        assert run["parent_id"] is None, run
        assert run["status"] == "UNSET"
        trace_ids.add(run["trace_id"])
        assert not links_to(spans, job_id)  # nothing to link the claim to
    assert len(trace_ids) == 5  # each its own root
    claims = [s for s in spans if s["name"] == "receive traced"]
    assert sum(s["attributes"]["messaging.batch.message_count"] for s in claims) == 5


def test_a_plain_sql_producer_may_store_a_context_of_its_own(dsn, conn, tmp_path):
    trace_file = tmp_path / "spans.jsonl"
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    carrier = {"traceparent": f"00-{trace_id}-{span_id}-01", "tracestate": "vendor=x"}
    job_id = conn.execute("INSERT INTO supervisor.jobs (kind, queue, args, trace_context) "
                          "VALUES ('traced_ok', 'traced', '{\"n\": 3}', %s) RETURNING id",
                          (json.dumps(carrier),)).fetchone()[0]
    burst(dsn, trace_file)
    [run] = process_spans(read_log(trace_file), job_id)
    assert (run["trace_id"], run["parent_id"]) == (trace_id, span_id)


def test_no_otel_turns_tracing_off_even_when_the_app_uses_it(dsn, tmp_path, producer_tracer):
    tracer, _ = producer_tracer
    trace_file = tmp_path / "spans.jsonl"
    with tracer.start_as_current_span("web request"):
        job_id = supervisor.enqueue("traced_ok", {"n": 1}, queue="traced", dsn=dsn)
    burst(dsn, trace_file, "--no-otel")
    assert job_row(dsn, job_id)["state"] == "completed"
    assert read_log(trace_file) == []


def test_a_retried_job_continues_the_same_trace_on_each_attempt(dsn, tmp_path, conn,
                                                                producer_tracer):
    tracer, exporter = producer_tracer
    trace_file = tmp_path / "spans.jsonl"
    with tracer.start_as_current_span("web request"):
        job_id = supervisor.enqueue("traced_ok", {"n": 1}, queue="traced", dsn=dsn)
    request = exporter.get_finished_spans()[0]
    # Attempt 1 ended as a crash would leave it: retryable and due now.
    conn.execute("UPDATE supervisor.jobs SET attempt = 1, state = 'available' WHERE id = %s",
                  (job_id,))
    burst(dsn, trace_file)
    [run] = process_spans(read_log(trace_file), job_id)
    assert run["attributes"]["pg_supervisor.job.attempt"] == 2
    assert run["parent_id"] == f"{request.context.span_id:016x}"
    assert os.path.getsize(trace_file) > 0
