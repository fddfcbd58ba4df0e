"""The otel extra's parts one by one, against a real database where they store
something: the carrier producers store, the CLI's TRACEPARENT, the column's check, the
RUN frame's field, the parent's claim and settle spans, the setting."""

from __future__ import annotations

import asyncio
import json
import threading

import psycopg
import pytest
from click.testing import CliRunner
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from tracing_support import memory_tracer

import supervisor
from shared import tracing, wire
from shared.batches import Callback
from shared.enqueue import run_plan
from shared.jobs import ClaimedJob
from shared.producers.aio import enqueue_async, enqueue_many_async
from shared.producers.plans import Row, insert_rows
from supervisor.cli.main import main
from supervisor.config import ConfigError, build_config
from supervisor.observe import JobTracer, TracingUnavailable, wants_tracing
from supervisor.observe import tracing as parent_tracing
from workers import tracing as child_tracing

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def in_span():
    """A current span with known ids and a tracestate, without any global provider."""
    context = SpanContext(TRACE_ID, SPAN_ID, is_remote=False,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED),
                          trace_state=TraceState([("vendor", "x")]))
    with trace.use_span(NonRecordingSpan(context)):
        yield


@pytest.fixture
def spans():
    with memory_tracer("test") as pair:
        yield pair


def stored(conn, ids) -> list:
    rows = dict(conn.execute("SELECT id, trace_context FROM supervisor.jobs "
                             "WHERE id = ANY(%s)", (list(ids),)).fetchall())
    return [rows[i] for i in ids]


EXPECTED = {"traceparent": TRACEPARENT, "tracestate": "vendor=x"}


# -- the producer's carrier ------------------------------------------------------------

def test_no_current_span_stores_nothing():
    assert tracing.current_trace_context() is None
    with trace.use_span(trace.INVALID_SPAN):
        assert tracing.current_trace_context() is None


def test_the_current_span_becomes_w3c_headers(in_span):
    assert json.loads(tracing.current_trace_context()) == EXPECTED


def test_every_producer_path_stores_the_context(dsn, conn, in_span, monkeypatch):
    from tracing_quiet_handlers import loaded_otel_modules as handle

    monkeypatch.setenv("SUPERVISOR_DSN", dsn)
    ids = [supervisor.enqueue("k", dsn=dsn),  # the plain Row, through the combiner
           supervisor.enqueue("k", dsn=dsn, conn=conn),
           supervisor.enqueue("k", delay=60, dsn=dsn),  # the general INSERT
           supervisor.enqueue("k", unique_key="u1", dsn=dsn),
           *supervisor.enqueue_many("k", [{}, {"a": "\\\t"}], dsn=dsn),  # COPY
           *supervisor.enqueue_many("k", [{}], delay=5, dsn=dsn),  # COPY with a due time
           *supervisor.enqueue_many("k", [{}, {}], unique_keys=["u2", None], dsn=dsn),
           *supervisor.enqueue_many("k", [{}], then=Callback("cb", {}), dsn=dsn).ids]
    ids.append(supervisor.enqueue("k", depends_on=[ids[0]], dsn=dsn))
    ids += [handle.enqueue(), *handle.enqueue_many([{}, {}]),
            handle.options(delay=30).enqueue()]

    async def produce():
        return [await enqueue_async("k", dsn=dsn),
                *await enqueue_many_async("k", [{}, {}], dsn=dsn)]

    ids += asyncio.run(produce())
    assert stored(conn, ids) == [EXPECTED] * len(ids)


def test_outside_a_span_every_path_stores_null(dsn, conn):
    ids = [supervisor.enqueue("k", dsn=dsn), supervisor.enqueue("k", delay=60, dsn=dsn),
           *supervisor.enqueue_many("k", [{}], dsn=dsn),
           *supervisor.enqueue_many("k", [{}], unique_keys=["u"], dsn=dsn)]
    assert stored(conn, ids) == [None] * len(ids)


def test_rows_sharing_one_insert_keep_their_own_contexts(dsn, conn):
    rows = [Row("k", "default", "{}", 0, None, None, json.dumps({"traceparent": TRACEPARENT})),
            Row("k", "default", "{}", 0, None, None, None)]
    ids = run_plan(insert_rows(rows), None, dsn, atomic=False)
    assert stored(conn, ids) == [{"traceparent": TRACEPARENT}, None]


def test_each_thread_enqueues_under_its_own_span(dsn, conn):
    contexts = {}

    def produce(n: int) -> None:
        context = SpanContext(TRACE_ID + n, SPAN_ID + n, False, TraceFlags(1))
        with trace.use_span(NonRecordingSpan(context)):
            contexts[supervisor.enqueue("k", {"n": n}, dsn=dsn)] = context

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for job_id, context in contexts.items():
        [carrier] = stored(conn, [job_id])
        assert carrier["traceparent"] == f"00-{context.trace_id:032x}-{context.span_id:016x}-01"


# -- the command line ------------------------------------------------------------------

def test_supervisor_enqueue_stores_traceparent_from_its_environment(dsn, conn):
    result = CliRunner().invoke(main, ["enqueue", "k", "--dsn", dsn],
                                env={"TRACEPARENT": TRACEPARENT, "TRACESTATE": "a=1"})
    assert result.exit_code == 0, result.output
    assert stored(conn, [int(result.output)]) == [{"traceparent": TRACEPARENT,
                                                   "tracestate": "a=1"}]
    assert tracing.current_trace_context() is None  # not left behind in this process


@pytest.mark.parametrize("bad", ["00-xyz", TRACEPARENT.replace("4bf9", "4BF9"),
                                 "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
                                 "ff" + TRACEPARENT[2:]])
def test_a_malformed_traceparent_is_a_one_line_usage_error(dsn, conn, bad):
    result = CliRunner().invoke(main, ["enqueue", "k", "--dsn", dsn],
                                env={"TRACEPARENT": bad})
    assert result.exit_code == 2
    assert result.output.startswith("supervisor: error: TRACEPARENT is not a W3C traceparent")
    assert len(result.output.strip().splitlines()) == 1
    assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0] == 0


def test_a_huge_tracestate_is_refused():
    with pytest.raises(ValueError, match="TRACESTATE is longer"):
        tracing.carrier_from_environment({"TRACEPARENT": TRACEPARENT, "TRACESTATE": "a" * 600})


# -- the column ------------------------------------------------------------------------

@pytest.mark.parametrize("value", ['"00-abc"', "[1, 2]", "42",
                                   json.dumps({"traceparent": "x" * 5000})])
def test_the_column_takes_only_a_small_object(conn, value):
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("INSERT INTO supervisor.jobs (kind, trace_context) VALUES ('k', %s)",
                     (value,))


# -- the RUN frame ---------------------------------------------------------------------

def test_run_carries_the_context_before_the_args():
    carrier = json.dumps(EXPECTED)
    data = wire.Run.pack(1, "k", "q", 1, 3, '{"a": 1}', carrier)
    body = data[wire.HEADER_SIZE:]
    assert body.index(b'"trace"') < body.index(b'"args"')
    run = wire.Run.decode(wire.Frame(wire.RUN, 0, body))
    assert (run.trace_context, run.args) == (EXPECTED, {"a": 1})
    plain = wire.Run.decode(wire.Frame(wire.RUN, 0, wire.Run.pack(1, "k", "q", 1, 3, "{}")
                                       [wire.HEADER_SIZE:]))
    assert plain.trace_context is None
    again = wire.Run.decode(wire.Frame(wire.RUN, 0, run.encode()[wire.HEADER_SIZE:]))
    assert again.trace_context == EXPECTED


def test_args_the_child_cannot_parse_keep_the_context():
    body = wire.Run.pack(1, "k", "q", 1, 3, '{"n": 1e999}',
                         json.dumps(EXPECTED))[wire.HEADER_SIZE:]
    run = wire.Run.decode(wire.Frame(wire.RUN, 0, body))
    assert run.args_error is not None and run.trace_context == EXPECTED


# -- the parent's spans ----------------------------------------------------------------

def _job(job_id: int, carrier: str | None) -> ClaimedJob:
    return ClaimedJob(job_id, "k", "q", 1, 3, 0, None, "{}", 0.0, carrier)


def test_a_claim_links_its_jobs_and_a_write_links_and_forgets_them(spans):
    tracer, exporter = spans
    jobs = JobTracer(tracer)
    carrier = json.dumps({"traceparent": TRACEPARENT})
    begun = jobs.now()
    jobs.claimed("q", [_job(1, carrier), _job(2, None), _job(3, '{"traceparent": 7}'),
                       _job(4, "not json")], [], begun)
    assert jobs.remembered() == 1
    jobs.wrote([1, 2], jobs.now(), unwritten=[1])  # the statement failed for job 1
    assert jobs.remembered() == 1
    jobs.claimed("q", [], [1], jobs.now())  # carried on the next claim: written
    assert jobs.remembered() == 0
    claim, failed_write, carried = exporter.get_finished_spans()
    assert claim.name == "receive q" and claim.kind == trace.SpanKind.CONSUMER
    assert claim.parent is None and claim.start_time == begun
    assert claim.attributes["messaging.batch.message_count"] == 4
    [link] = claim.links
    assert (link.context.trace_id, link.context.span_id) == (TRACE_ID, SPAN_ID)
    assert link.attributes == {"messaging.message.id": "1"}
    assert failed_write.name == "settle"
    assert failed_write.status.status_code == trace.StatusCode.ERROR
    assert [dict(link.attributes) for link in failed_write.links] == [
        {"messaging.message.id": "1", "pg_supervisor.write": "settle"}]
    assert [dict(link.attributes) for link in carried.links] == [
        {"messaging.message.id": "1", "pg_supervisor.write": "complete"}]


def test_a_failed_claim_is_an_error_span_and_keeps_what_it_carried(spans):
    tracer, exporter = spans
    jobs = JobTracer(tracer)
    jobs.claimed("q", [_job(1, json.dumps({"traceparent": TRACEPARENT}))], [], jobs.now())
    jobs.claimed("q", [], [1], jobs.now(), psycopg.OperationalError("server closed"))
    assert jobs.remembered() == 1
    failed = exporter.get_finished_spans()[1]
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert failed.events[0].name == "exception" and not failed.links


def test_remembered_contexts_are_bounded(spans, monkeypatch):
    monkeypatch.setattr(parent_tracing, "MAX_REMEMBERED", 3)
    jobs = JobTracer(spans[0])
    carrier = json.dumps({"traceparent": TRACEPARENT})
    jobs.claimed("q", [_job(n, carrier) for n in range(10)], [], jobs.now())
    assert jobs.remembered() == 3


# -- the setting -----------------------------------------------------------------------

def test_the_otel_setting(monkeypatch):
    assert build_config({}).otel is None
    assert build_config({"otel": "auto"}).otel is None
    assert build_config({"otel": True}).otel is True
    assert build_config({}, {"otel": False}).otel is False
    with pytest.raises(ConfigError, match="otel: expected true or false"):
        build_config({"otel": "yes"})
    assert wants_tracing(True) and not wants_tracing(False)
    assert wants_tracing(None)  # this test process imported opentelemetry


def test_otel_true_without_the_package(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_otel(name, *args, **kwargs):
        if name.startswith("opentelemetry"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_otel)
    with pytest.raises(TracingUnavailable, match=r"pip install 'pg-supervisor\[otel\]'"):
        wants_tracing(True)


def test_child_tracing_off_leaves_run_job_untouched():
    def run_job(run):
        return run

    assert not child_tracing.enabled()
    assert child_tracing.traced(run_job) is run_job


# -- tracing that fails must not cost a job or the loop ---------------------------------

class _BrokenTracer:
    def start_span(self, *args, **kwargs):
        raise RuntimeError("exporter misconfigured")

    start_as_current_span = start_span


def test_a_broken_tracer_in_the_parent_is_logged_once_and_the_loop_goes_on(caplog):
    jobs = JobTracer(_BrokenTracer())
    carrier = json.dumps({"traceparent": TRACEPARENT})
    jobs.claimed("q", [_job(1, carrier)], [], jobs.now())
    jobs.wrote([1], jobs.now())
    assert jobs.errors == 2
    assert [r.message for r in caplog.records].count(
        "could not record a claim span; later failures are only counted") == 1


def test_a_broken_tracer_in_the_child_still_runs_the_job():
    def run_job(run):
        return wire.Failed(run.id, "error", "ValueError: x", "tb")

    spans = child_tracing._JobSpans(run_job)
    spans._tracer = _BrokenTracer()
    run = wire.Run(5, "k", "q", 1, 3, None, {}, None, {"traceparent": TRACEPARENT})
    assert spans(run).job == 5


def test_the_child_span_of_a_failed_job(spans):
    tracer, exporter = spans

    def run_job(run):
        return wire.Failed(run.id, "binding", "args do not fit k(a): missing a", None)

    traced = child_tracing._JobSpans(run_job)
    traced._tracer = tracer
    traced(wire.Run(5, "k", "q", 2, 3, None, {}, None, {"traceparent": TRACEPARENT}))
    [span] = exporter.get_finished_spans()
    assert span.parent.span_id == SPAN_ID and span.parent.trace_id == TRACE_ID
    assert span.status.status_code == trace.StatusCode.ERROR
    assert span.attributes["pg_supervisor.job.attempt"] == 2
    assert dict(span.events[0].attributes) == {
        "exception.type": "binding", "exception.message": "args do not fit k(a): missing a"}


@pytest.mark.parametrize("parent", [
    TRACEPARENT, TRACEPARENT[:-2] + "00", "01" + TRACEPARENT[2:] + "-later-field",
    TRACEPARENT + "-extra", TRACEPARENT.upper(), "ff" + TRACEPARENT[2:],
    "00-" + "0" * 32 + "-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16
    + "-01", TRACEPARENT[:-1], " " + TRACEPARENT, "00-4bf92f3577b34da6a3ce929d0e0e473g-"
    "00f067aa0ba902b7-01", ""])
def test_parent_links_exactly_the_contexts_the_child_continues(spans, parent):
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    child_sees = trace.get_current_span(
        TraceContextTextMapPropagator().extract({"traceparent": parent})).get_span_context()
    parent_sees = JobTracer(spans[0])._parse(json.dumps({"traceparent": parent}))
    assert (parent_sees is not None) == child_sees.is_valid
    if parent_sees is not None:
        assert (parent_sees.trace_id, parent_sees.span_id, parent_sees.trace_flags) == \
            (child_sees.trace_id, child_sees.span_id, child_sees.trace_flags)
