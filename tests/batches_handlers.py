"""Handlers for the batch tests, loaded with ``--app batches_handlers``.

The callback writes what it saw (its batch summary and every member it streamed) to
the file named by ``E2E_LOG`` through ``e2e_handlers.record``.
"""

import os
import time

from e2e_handlers import record

from workers import Discard, current_job, job


@job(queue="bt")
def bt_member(n: int = 0, fail: bool = False, sleep: float = 0.0) -> int:
    """A member: returns ``n``; ``fail`` discards it; ``sleep`` keeps it running."""
    record("run", n=n)
    if sleep:
        time.sleep(sleep)
    if fail:
        raise Discard(f"member {n} asked to fail")
    return n


@job(queue="bt")
def bt_noop() -> None:
    """The cheapest member, for the 100k drain."""


@job(queue="bt")
def bt_callback(tag: str = "") -> dict:
    """The callback: records its batch's summary and a digest of every member."""
    batch = current_job().batch
    count = total = 0
    states: dict[str, int] = {}
    for member in batch.results():
        count += 1
        states[member.state] = states.get(member.state, 0) + 1
        if isinstance(member.result, int):
            total += member.result
    s = batch.summary
    record("callback", tag=tag, batch=batch.id, total=s.total, completed=s.completed,
           discarded=s.discarded, streamed=count, result_sum=total, states=states,
           pid=os.getpid())
    return {"streamed": count, "sum": total}


@job(queue="bt")
def bt_step(name: str) -> str:
    """A step of a dependency chain."""
    record("step", name=name)
    if name.startswith("fail"):
        raise Discard(f"step {name} fails")
    return name
