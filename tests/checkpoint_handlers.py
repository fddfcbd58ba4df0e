"""Handlers for the checkpoint and stop-notice tests (``--app checkpoint_handlers``).

Like ``e2e_handlers``, each run appends what it did to the file named by ``E2E_LOG``,
so the tests judge by the handlers' own records: where each run resumed, when it ran,
and what it was told.
"""

import os
import time

from e2e_handlers import record
from gil_busy import gil_holding_call

from shared.jobs import Backoff
from workers import Stopping, current_job, job


@job(on_stop="raise", backoff=Backoff(base=0.1, cap=0.2))
def ck_batch(steps: int = 12, step: float = 1.0) -> dict:
    """A long batch: one step a ``step`` seconds, a checkpoint after each; told to stop,
    it hands the job back (its last checkpoint says where it got to)."""
    ctx = current_job()
    state = ctx.resume or {"done": 0}
    record("start", done=state["done"], resumed=ctx.resume is not None)
    began = time.time()
    done = state["done"]
    try:
        while done < steps:
            time.sleep(step)
            done += 1
            ctx.checkpoint({"done": done})
            record("step", done=done)
    except Stopping:
        record("stopping", done=done, ran=time.time() - began)
        raise
    record("end", done=done, ran=time.time() - began)
    return {"done": done}


@job
def ck_flag(limit: float = 60.0) -> str:
    """Polls ``stopping`` (no ``on_stop``): checkpoints and hands the job back once told."""
    ctx = current_job()
    record("start", resumed=ctx.resume)
    deadline = time.monotonic() + limit
    n = 0
    while time.monotonic() < deadline:
        if ctx.stopping:
            record("saw_stopping", reason=ctx.stop_reason)
            ctx.checkpoint({"n": n}, flush=True)
            record("flushed", n=n)
            raise Stopping(ctx.stop_reason or "stopping")
        n += 1
        time.sleep(0.05)
    return "never told"


@job
def ck_ignore(limit: float = 60.0) -> str:
    """Ignores every notice: runs until killed."""
    record("start")
    end = time.monotonic() + limit
    while time.monotonic() < end:
        time.sleep(0.05)
    return "outlived the grace"


@job
def ck_bad_states() -> dict:
    """Tries states the checkpoint must refuse, then finishes: the refusals are records,
    and nothing may have been stored."""
    ctx = current_job()
    refusals = []
    for state in ({"f": object()}, {"x": float("nan")}, {"big": "x" * (2 << 20)}):
        try:
            ctx.checkpoint(state)
        except ValueError as exc:
            refusals.append(str(exc))
    record("refused", messages=refusals)
    return {"refused": len(refusals)}


@job
def ck_flush(n: int = 3) -> int:
    """Flushed checkpoints, one after another: each is in the row when it returns."""
    ctx = current_job()
    for i in range(1, n + 1):
        ctx.checkpoint({"i": i}, flush=True)
        record("flushed", i=i)
    return n


@job(soft_timeout=0.3)
def ck_soft() -> str | None:
    """Catches its soft timeout and says what ``stop_reason`` was then."""
    from workers import SoftTimeout

    try:
        time.sleep(10)
    except SoftTimeout:
        return current_job().stop_reason
    return "no soft timeout"


@job
def ck_raise_unasked() -> None:
    """Raises Stopping although nobody told it to stop."""
    raise Stopping("by itself")


@job(on_stop="raise")
def ck_wait_told(seconds: float = 20.0) -> str:
    """Sleeps; a notice makes Stopping come out of the sleep (uncaught)."""
    time.sleep(seconds)
    return "slept"


@job
def ck_flush_once() -> dict:
    """One flushed checkpoint: returns once the parent says it was written."""
    current_job().checkpoint({"at": "the end"}, flush=True)
    return {"flushed": True}


@job(on_stop="raise")
def ck_flush_loop(limit: float = 20.0) -> int:
    """Flushed checkpoints back to back: a notice lands while the runtime writes a frame
    or reads the answer, and must come out after it, in the handler."""
    ctx = current_job()
    end = time.monotonic() + limit
    n = 0
    while time.monotonic() < end:
        n += 1
        ctx.checkpoint({"n": n}, flush=True)
    return n


_held: list[bytes] = []


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


@job(on_stop="raise", backoff=Backoff(base=0.1, cap=0.2))
def ck_memory(target_mb: int, limit: float = 60.0) -> str:
    """Grows its RSS past ``target_mb`` and waits; told to stop (the memory cap), it lets
    ``Stopping`` out. Run again from its checkpoint, it finishes without growing."""
    ctx = current_job()
    record("start", resumed=ctx.resume, rss=_rss_mb())
    if ctx.resume is not None:
        return "resumed"
    ctx.checkpoint({"grown": True})  # before growing: a notice may come at any moment
    try:
        while _rss_mb() < target_mb:
            _held.append(b"\x01" * (4 << 20))  # written, so resident
        record("grown", rss=_rss_mb())
        time.sleep(limit)
    except Stopping:
        record("stopping", reason=ctx.stop_reason)
        raise
    finally:
        _held.clear()
    return "never told"


@job(on_stop="raise")
def ck_native(seconds: float = 8.0) -> str:
    """Asks for ``Stopping`` but spends its time in one native call that holds the GIL
    (a regex of catastrophic backtracking): no bytecode boundary comes, so neither the
    exception nor the child's heartbeat thread can run until the call returns."""
    native_call = gil_holding_call(seconds)
    record("start")  # from here on, inside the call
    try:
        native_call()
    except Stopping:
        record("stopping")
        raise
    record("native_returned")
    return "outlived the grace"
