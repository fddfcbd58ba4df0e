"""The otel extra under faults: a child killed mid-job, many jobs in several claims, a
supervisor killed with SIGKILL and its jobs rescued by another. The traces must stay
whole where they can (every later attempt continues the producer's trace) and the
parent must forget the contexts of jobs whose outcome it wrote."""

from __future__ import annotations

import signal

import pytest
from e2e import Supervisor, job_row, read_log, state_counts, wait_until
from tracing_support import memory_tracer

import supervisor

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]  # real supervisors: CI lane


@pytest.fixture
def request_span():
    with memory_tracer("test-producer") as (tracer, _exporter):
        yield tracer


def traced_supervisor(dsn, trace_file, *args: str) -> Supervisor:
    return Supervisor(dsn, *args, "-q", "traced", env={"TRACE_FILE": str(trace_file)},
                      app="tracing_handlers")


def spans_of(spans: list[dict], job_id: int, prefix: str = "process ") -> list[dict]:
    return [s for s in spans if s["name"].startswith(prefix)
            and s["attributes"].get("messaging.message.id") == str(job_id)]


def write_links(spans: list[dict], job_id: int) -> list[dict]:
    return [link for s in spans for link in s["links"]
            if link["attributes"].get("messaging.message.id") == str(job_id)
            and "pg_supervisor.write" in link["attributes"]]


def test_a_child_killed_mid_job_loses_its_span_but_the_retry_continues_the_trace(
        dsn, tmp_path, request_span):
    trace_file = tmp_path / "spans.jsonl"
    with request_span.start_as_current_span("request") as span:
        job_id = supervisor.enqueue("traced_crash_once", queue="traced", dsn=dsn)
    sup = traced_supervisor(dsn, trace_file, "--burst", "-n", "1")
    assert sup.wait(90) == 0, sup.err
    row = job_row(dsn, job_id)
    assert (row["state"], row["attempt"]) == ("completed", 2)
    assert row["errors"][0]["kind"] == "crashed"
    spans = read_log(trace_file)
    # The killed child never ended its span: only attempt 2's reached the exporter.
    [run] = spans_of(spans, job_id)
    assert run["attributes"]["pg_supervisor.job.attempt"] == 2
    assert run["parent_id"] == f"{span.get_span_context().span_id:016x}"
    # Both outcomes (the crash, then the completion) were written under links to it.
    links = write_links(spans, job_id)
    assert len(links) == 2
    assert {link["trace_id"] for link in links} == {f"{span.get_span_context().trace_id:032x}"}


def test_many_jobs_each_continue_their_own_trace_across_several_claims(dsn, tmp_path,
                                                                        request_span):
    trace_file = tmp_path / "spans.jsonl"
    traces = {}
    for n in range(60):
        with request_span.start_as_current_span(f"request {n}") as span:
            traces[supervisor.enqueue("traced_burst", {"n": n}, queue="traced", dsn=dsn)] = \
                f"{span.get_span_context().trace_id:032x}"
    sup = traced_supervisor(dsn, trace_file, "--burst", "-n", "2")
    assert sup.wait(90) == 0, sup.err
    assert state_counts(dsn) == {"completed": 60}
    spans = read_log(trace_file)
    for job_id, trace_id in traces.items():
        [run] = spans_of(spans, job_id)
        assert run["trace_id"] == trace_id
        [written] = write_links(spans, job_id)
        assert written["trace_id"] == trace_id
    claims = [s for s in spans if s["name"] == "receive traced"]
    taken = [link for s in claims for link in s["links"]
             if "pg_supervisor.write" not in link["attributes"]]
    assert sorted(int(link["attributes"]["messaging.message.id"]) for link in taken) == \
        sorted(traces)
    assert sum(s["attributes"]["messaging.batch.message_count"] for s in claims) == 60


def test_jobs_rescued_from_a_killed_supervisor_keep_their_trace(dsn, tmp_path, request_span):
    trace_file = tmp_path / "spans.jsonl"
    marker = tmp_path / "started"
    with request_span.start_as_current_span("request") as span:
        job_id = supervisor.enqueue("traced_block_once", {"marker": str(marker)},
                                    queue="traced", dsn=dsn)
    first = traced_supervisor(dsn, trace_file, "-n", "1", "--lease-ttl", "2")
    try:
        wait_until(marker.exists, what="the first attempt to start")
        first.signal(signal.SIGKILL)  # its child follows (PDEATHSIG); the lease expires
        first.wait(30)
        # Not --burst: the job is still `running` under the dead lease when it starts.
        second = traced_supervisor(dsn, trace_file, "-n", "1", "--lease-ttl", "2")
        try:
            wait_until(lambda: job_row(dsn, job_id)["state"] == "completed", timeout=60,
                       what="the rescued job to complete")
            second.signal(signal.SIGTERM)
            assert second.wait(60) == 0, second.err
        finally:
            second.stop()
    finally:
        first.stop()
    # The killed attempt's span never ended; the rescued run continues the trace.
    [run] = spans_of(read_log(trace_file), job_id)
    assert run["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert run["parent_id"] == f"{span.get_span_context().span_id:016x}"
