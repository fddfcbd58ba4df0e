"""What the otel extra costs (issue 15): off, where it must cost nothing, and on.

* context: ``shared.tracing.current_trace_context()`` per call, with OpenTelemetry never
  imported (every producer call pays this when the extra is off), and inside a span.
* enqueue: ``enqueue(kind, args, conn=c)`` per call, 2,000 sequential autocommit calls,
  before (the checkout named by ``--before``, without the column) and now, off; now
  inside a span (on). Each side runs in its own interpreter.
* drain: 20,000 no-op jobs, ``supervisor run -n 2 --burst``, from start to exit: before;
  now (otel off: the bench app never imports it); now with ``--otel`` and an SDK
  BatchSpanProcessor whose exporter only counts (scripts/bench_tracing.py), on jobs
  enqueued under a span (so each claim links and each child continues a trace).

Runs interleave the variants round by round. Usage:

    python scripts/bench/tracing.py --before <checkout> [--runs 3] [--jobs 20000]
                                    [--calls 2000] [--commit fast|durable] [--skip-drain]

``--commit fast`` (the default) sets ``synchronous_commit = off`` on both scratch
databases: on a shared machine the WAL flush of each call's commit swamps everything
else, and what is compared here is the CPU cost of a call.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
import psycopg

_CONTEXT = r"""
import sys, time
sys.path.insert(0, {root!r})
from shared.tracing import current_trace_context
def per_call(n=200_000):
    t0 = time.perf_counter()
    for _ in range(n):
        current_trace_context()
    return (time.perf_counter() - t0) / n * 1e9
off = min(per_call() for _ in range(5))
assert "opentelemetry" not in sys.modules
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
with TracerProvider().get_tracer("b").start_as_current_span("s"):
    on = min(per_call(20_000) for _ in range(5))
print(off, on)
"""

_ENQUEUE = r"""
import sys, time
sys.path.insert(0, {root!r})
import psycopg
from shared.enqueue import enqueue
conn = psycopg.connect({dsn!r}, autocommit=True)
span = None
if {traced!r}:
    from opentelemetry.sdk.trace import TracerProvider
    span = TracerProvider().get_tracer("b").start_as_current_span("request")
    span.__enter__()
for _ in range(200):
    enqueue("run_noop", {{"i": 0}}, queue="warm", conn=conn)
t0 = time.perf_counter()
for i in range({n}):
    enqueue("run_noop", {{"i": i}}, queue="bench_enqueue", conn=conn)
print((time.perf_counter() - t0) / {n} * 1e6)
assert ("opentelemetry" in sys.modules) == {traced!r}
"""


_PARENT = r"""
import inspect, sys, time
sys.path.insert(0, {root!r})
from shared.wire import Run
try:  # rows read by column name (the claim builder, issue 25)
    from supervisor.db.claim import ClaimRequest, decode, row_maker
except ImportError:  # a checkout from before it: rows read by position
    from supervisor.db.store import _claimed_jobs as claimed_jobs
else:
    make = row_maker(("id", "kind", "queue", "attempt", "max_attempts", "priority",
                      "timeout", "args", "wait", "trace_context", "done"))
    request = ClaimRequest("bench", ["run_noop"], 512)
    def claimed_jobs(rows):
        return decode(request, [make(row) for row in rows])[1]
pack = Run.pack
traced = len(inspect.signature(pack).parameters) == 7
rows = [(i, "run_noop", "bench", 1, 20, 0, None, '{{"i": 1}}', 0.01, None, False)
        for i in range(512)]
def once():
    t0 = time.perf_counter()
    for _ in range(20):
        jobs = claimed_jobs(list(rows))
        if traced:
            for j in jobs:
                pack(j.id, j.kind, j.queue, j.attempt, j.max_attempts, j.args_json,
                     j.trace_context)
        else:
            for j in jobs:
                pack(j.id, j.kind, j.queue, j.attempt, j.max_attempts, j.args_json)
    return (time.perf_counter() - t0) / (20 * 512) * 1e9
print(min(once() for _ in range(15)))
"""


_ON_COST = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from shared import wire
from shared.jobs import ClaimedJob
from supervisor.observe.tracing import JobTracer
from workers import tracing as child_tracing

class Drop(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(Drop()))
carrier = json.dumps({{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
parent = JobTracer(provider.get_tracer("parent"))
jobs = [ClaimedJob(i, "k", "q", 1, 3, 0, None, "{{}}", 0.0, carrier) for i in range(64)]
def parent_round():
    t0 = time.perf_counter()
    for _ in range(50):
        parent.claimed("q", jobs, [], parent.now())
        parent.wrote([job.id for job in jobs], parent.now())
    return (time.perf_counter() - t0) / (50 * 64) * 1e6
child = child_tracing._JobSpans(lambda run: wire.Done(run.id, b"null"))
child._tracer = provider.get_tracer("child")
run = wire.Run(1, "k", "q", 1, 3, None, {{}}, None, json.loads(carrier))
def child_round():
    t0 = time.perf_counter()
    for _ in range(2000):
        child(run)
    return (time.perf_counter() - t0) / 2000 * 1e6
print(min(parent_round() for _ in range(5)), min(child_round() for _ in range(5)))
"""


def rotated(variants: list, n: int) -> list:
    """The variants in a different order each round, so none always runs first (the
    machine's load drifts during a round)."""
    k = n % len(variants)
    return variants[k:] + variants[:k]


def python(code: str, root: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, cwd=str(root), check=False)
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    return done.stdout.strip()


def fill(dsn: str, jobs: int, traced: bool, root: Path) -> None:
    code = (f"import sys; sys.path.insert(0, {str(root)!r})\n"
            "import psycopg\nfrom shared.enqueue import enqueue_many\n")
    if traced:
        code += ("from opentelemetry.sdk.trace import TracerProvider\n"
                 "s = TracerProvider().get_tracer('b').start_as_current_span('r')\n"
                 "s.__enter__()\n")
    code += f"enqueue_many('run_noop', [{{}}] * {jobs}, queue='bench', dsn={dsn!r})\n"
    python(code, root)


def drain(dsn: str, jobs: int, root: Path, otel: bool) -> float:
    common.reset(dsn)
    fill(dsn, jobs, otel, root)
    os.environ["BENCH_CODE"] = str(root)
    args = ["-n", "2", "-q", "bench"] + (["--otel", "--app", "bench_tracing"] if otel else [])
    seconds = common.run_burst(dsn, *args)
    done = common.count_state(dsn, "completed")
    if done != jobs:
        raise SystemExit(f"only {done} of {jobs} jobs completed")
    return jobs / seconds


def old_scratch_database(base_dsn: str, name: str, root: Path) -> str:
    """A scratch database migrated by the code at ``root`` (its own schema version)."""
    common.drop_database(base_dsn, name)
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(base_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(base_dsn, dbname=name)
    python(f"import sys; sys.path.insert(0, {str(root)!r})\nimport psycopg\n"
           f"from shared.migrate import migrate\n"
           f"migrate(psycopg.connect({dsn!r}, autocommit=True))\n", root)
    return dsn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--before", required=True, type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--commit", choices=["durable", "fast"], default="fast")
    parser.add_argument("--skip-drain", action="store_true")
    args = parser.parse_args()
    now, before = common.ROOT, args.before.resolve()
    print(common.machine(args.dsn))
    off, on = (float(x) for x in python(_CONTEXT.format(root=str(now)), now).split())
    print(f"| current_trace_context(), otel never imported | {off:.0f} ns |")
    print(f"| current_trace_context(), inside a span | {on:.0f} ns |")

    parent_on, child_on = (float(x) for x in
                           python(_ON_COST.format(root=str(now)), now).split())
    print(f"| on: parent's claim + settle spans, per job (64 per claim) | {parent_on:.1f} us |")
    print(f"| on: child's process span, per job | {child_on:.1f} us |")
    parent: dict[str, list[float]] = {}
    for _ in range(5):
        for label, root in (("before", before), ("now", now)):
            parent.setdefault(label, []).append(
                float(python(_PARENT.format(root=str(root)), root)))
    for label, values in parent.items():
        print(f"| parent per job, claim rows to RUN frame, {label} | "
              f"{min(values):.0f} ns (best of 5 interpreters) |")

    dsn_before = old_scratch_database(args.dsn, "bench_tracing_before", before)
    dsn_now = common.scratch_database(args.dsn, "bench_tracing_now")
    if args.commit == "fast":  # no WAL flush per call: the CPU cost shows, not the disk's
        for dsn in (dsn_before, dsn_now):
            with psycopg.connect(dsn, autocommit=True) as conn:
                name = conn.info.dbname
                conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    rounds: dict[str, list[float]] = {}
    for n in range(args.runs):
        variants = [("enqueue before", before, dsn_before, False),
                    ("enqueue now, off", now, dsn_now, False),
                    ("enqueue now, in a span", now, dsn_now, True)]
        for label, root, dsn, traced in rotated(variants, n):
            code = _ENQUEUE.format(root=str(root), dsn=dsn, n=args.calls, traced=traced)
            rounds.setdefault(label, []).append(float(python(code, root)))
    for label, values in rounds.items():
        print(f"| {label} | {common.median(values):.1f} us/call (runs: "
              f"{', '.join(f'{v:.1f}' for v in values)}) |")
    rates: dict[str, list[float]] = {}
    for n in range(0 if args.skip_drain else args.runs):
        variants = [("drain before", before, dsn_before, False),
                    ("drain now, off", now, dsn_now, False),
                    ("drain now, --otel", now, dsn_now, True)]
        for label, root, dsn, otel in rotated(variants, n):
            rates.setdefault(label, []).append(drain(dsn, args.jobs, root, otel))
    for label, values in rates.items():
        print(f"| {label} | {common.median(values):,.0f} jobs/s (runs: "
              f"{', '.join(f'{v:,.0f}' for v in values)}) |")
    print("load after:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    for name in ("bench_tracing_before", "bench_tracing_now"):
        common.drop_database(args.dsn, name)


if __name__ == "__main__":
    main()
