"""Round trips per second through the pool, against a raw pipe ping-pong, in one run.

Both sides fork the same number of children and keep one message in flight per child,
driven by a ``selectors`` loop in the parent. The raw side is the floor of what pipes
and orjson cost here: a hand-written child that echoes a ~200-byte frame. The pool side
is the real thing: ``Pool.dispatch`` of a no-op job, the child runtime (handler lookup,
argument binding, job context, heartbeat lock, process title), ``handle_event``,
``reap`` and ``tick`` every turn like the parent loop, and ``take_outcomes``.

    python scripts/bench_pool.py [--jobs 50000] [--children 2] [--runs 3] [--profile]

Prints a markdown table (medians of ``--runs``); ``--profile`` runs the pool side once
under pyinstrument and prints where the parent's time goes.
"""

from __future__ import annotations

import argparse
import os
import platform
import selectors
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import orjson

from shared.jobs import ClaimedJob
from supervisor.pool import JobDone, JobFailed, Pool, PoolSettings
from workers import job

HEADER = struct.Struct("!BBBI")
ARGS = {"path": "images/2026/11/some-file-name.png", "width": 640, "height": 480,
        "tags": ["a", "b", "c"], "note": "x" * 40}
ARGS_JSON = orjson.dumps(ARGS).decode()


@job(name="bench_noop")
def bench_noop(path: str, width: int, height: int, tags: list, note: str) -> None:
    return None


# -- raw ping-pong -----------------------------------------------------------------------

def _raw_child(rfd: int, wfd: int) -> None:
    buf = b""
    while True:
        data = os.read(rfd, 65536)
        if not data:
            os._exit(0)
        buf += data
        while len(buf) >= HEADER.size:
            _v, _mtype, _f, length = HEADER.unpack_from(buf)
            if len(buf) < HEADER.size + length:
                break
            msg = orjson.loads(buf[HEADER.size:HEADER.size + length])
            buf = buf[HEADER.size + length:]
            body = orjson.dumps({"id": msg["id"], "result": None})
            os.write(wfd, HEADER.pack(1, 4, 0, len(body)) + body)


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def bench_raw(jobs: int, children: int) -> tuple[float, float, float]:
    """Round trips/s of a hand-written selectors ping-pong with forked children, and
    the parent's and the children's CPU per round trip (µs)."""
    k0 = _children_cpu()
    sel = selectors.DefaultSelector()
    kids = []
    for _ in range(children):
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            for fd in [down_w, up_r] + [fd for _pid, r, w in kids for fd in (r, w)]:
                os.close(fd)
            _raw_child(down_r, up_w)
        os.close(down_r)
        os.close(up_w)
        os.set_blocking(up_r, False)
        kids.append((pid, up_r, down_w))
        sel.register(up_r, selectors.EVENT_READ, down_w)

    def send(wfd: int, n: int) -> None:
        body = orjson.dumps({"id": n, "kind": "bench_noop", "queue": "default",
                             "attempt": 1, "max_attempts": 20,
                             "args": orjson.Fragment(ARGS_JSON)})
        os.write(wfd, HEADER.pack(1, 2, 0, len(body)) + body)

    sent = done = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    for _pid, _r, w in kids:
        send(w, sent)
        sent += 1
    while done < jobs:
        for key, _mask in sel.select():
            data = os.read(key.fd, 65536)
            _v, _t, _f, length = HEADER.unpack_from(data)
            orjson.loads(data[HEADER.size:HEADER.size + length])
            done += 1
            if sent < jobs:
                send(key.data, sent)
                sent += 1
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    for pid, r, w in kids:
        os.close(w)
        os.close(r)
        os.waitpid(pid, 0)
    sel.close()
    return jobs / elapsed, cpu / jobs * 1e6, (_children_cpu() - k0) / jobs * 1e6


# -- through the pool ----------------------------------------------------------------------

def bench_pool(jobs: int, children: int) -> tuple[float, float, float]:
    """Round trips/s of no-op jobs through ``Pool``, driven like the parent loop, and
    the parent's and the children's CPU per job (µs; the children's includes their
    boot, a few ms)."""
    k0 = _children_cpu()
    sel = selectors.DefaultSelector()
    pool = Pool(PoolSettings(size=children), sel)
    pool.start()
    while pool.idle_count() < children:
        for key, mask in sel.select(1.0):
            pool.handle_event(key, mask)
        pool.take_outcomes()
    queue = [ClaimedJob(i, "bench_noop", "default", 1, 20, 0, None, ARGS_JSON)
             for i in range(jobs)]
    queue.reverse()
    done = failed = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    while done + failed < jobs:
        while queue and pool.idle_count():
            pool.dispatch(queue.pop())
        deadline = pool.next_deadline()
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        for key, mask in sel.select(timeout):
            if key.data is pool:
                pool.handle_event(key, mask)
        pool.reap()
        pool.tick()
        for outcome in pool.take_outcomes():
            if isinstance(outcome, JobDone):
                done += 1
            elif isinstance(outcome, JobFailed):
                failed += 1
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    if failed:
        raise SystemExit(f"{failed} no-op jobs failed")
    pool.stop()
    while pool.alive():
        sel.select(0.05)
        pool.reap()
    sel.close()
    return jobs / elapsed, cpu / jobs * 1e6, (_children_cpu() - k0) / jobs * 1e6


def machine() -> str:
    """One line about this machine."""
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg()[0]
    return (f"{os.cpu_count()} vCPU ({cpu}), Linux {platform.release()}, "
            f"Python {platform.python_version()}, orjson {orjson.__version__}, "
            f"load average {load:.2f} at start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--children", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0001)
        profiler.start()
        bench_pool(args.jobs, args.children)
        profiler.stop()
        print(profiler.output_text(unicode=False, color=False, show_all=False))
        return
    raw, pooled, raw_cpu, pool_cpu, raw_kids, pool_kids = [], [], [], [], [], []
    for _ in range(args.runs):
        # Interleaved, so that load from elsewhere on the machine hits both alike.
        rate, cpu, kids = bench_raw(args.jobs, args.children)
        raw.append(rate)
        raw_cpu.append(cpu)
        raw_kids.append(kids)
        rate, cpu, kids = bench_pool(args.jobs, args.children)
        pooled.append(rate)
        pool_cpu.append(cpu)
        pool_kids.append(kids)
    r, p = statistics.median(raw), statistics.median(pooled)
    print(f"machine: {machine()}")
    print(f"command: python scripts/bench_pool.py --jobs {args.jobs} "
          f"--children {args.children} --runs {args.runs}")
    print()
    print("| shape | round trips/s (median) | runs |")
    print("|---|---|---|")
    print(f"| raw pipe ping-pong, {args.children} children, 1 in flight each | {r:,.0f} | "
          + ", ".join(f"{x:,.0f}" for x in raw) + " |")
    print(f"| Pool, no-op job, {args.children} children | {p:,.0f} | "
          + ", ".join(f"{x:,.0f}" for x in pooled) + " |")
    pairs = [q / w for q, w in zip(pooled, raw, strict=True)]
    print(f"| ratio pool / raw (median of the paired runs) | {statistics.median(pairs):.2f} | "
          + ", ".join(f"{x:.2f}" for x in pairs) + " |")
    print()
    print(f"| CPU per round trip (µs, median of {args.runs}) | raw | Pool |")
    print("|---|---|---|")
    print(f"| parent | {statistics.median(raw_cpu):.1f} | "
          f"{statistics.median(pool_cpu):.1f} |")
    print(f"| children (all of them, per round trip) | {statistics.median(raw_kids):.1f} | "
          f"{statistics.median(pool_kids):.1f} |")


if __name__ == "__main__":
    main()
