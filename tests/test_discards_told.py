"""Every discard reaches ``on_discard`` (issue 45): a job discarded by the parent after
its child died (a crash, a hang, a timeout, the memory cap, poison) has its hooks run in
another child of the same supervisor, once, told the reason and the attempt's usage as
the table stores them."""

from __future__ import annotations

import pytest
from e2e import Supervisor, job_row, read_log, wait_until

from shared.enqueue import enqueue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CASES = {
    # kind: (reason told, the supervisor's extra flags)
    "dis_abort": ("crashed", ()),
    "dis_hang": ("hung", ()),
    "dis_timeout": ("timeout", ()),
    "dis_grow": ("memory", ("--max-memory-per-child", "150MiB")),
    "dis_segv": ("poison", ()),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_discard_the_parent_makes_runs_on_discard_in_another_child(dsn, tmp_path, kind):
    reason, flags = CASES[kind]
    log = tmp_path / "run.log"
    job_id = enqueue(kind, {}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "2", *flags, log_path=log, app="discard_handlers")
    try:
        wait_until(lambda: job_row(dsn, job_id).get("state") == "discarded", timeout=120,
                   what=f"{kind} to be discarded")
        wait_until(lambda: [r for r in read_log(log) if r["event"] == "discard"],
                   timeout=60, what="the on_discard hook")
        # Another job may follow: the hook is told once, not again.
        later = enqueue("dis_ok", {}, dsn=dsn)
        wait_until(lambda: job_row(dsn, later)["state"] == "completed", timeout=60,
                   what="a later job")
    finally:
        sup.stop()
    records = read_log(log)
    told = [r for r in records if r["event"] == "discard" and r["id"] == job_id]
    starts = [r for r in records if r["event"] == "start" and r["id"] == job_id]
    assert len(told) == 1, told
    assert told[0]["reason"] == reason
    row = job_row(dsn, job_id)
    entries = [e for e in row["errors"] if e["attempt"] == row["attempt"]]
    assert told[0]["kinds"] == [e["kind"] for e in entries]
    assert told[0]["kinds"][-1] == reason
    # The usage it is told is the attempt's, as stored.
    assert told[0]["usage"] is not None and told[0]["usage"] == entries[0]["usage"]
    # Not in the child that ran it (that one is gone), nor in the parent.
    assert told[0]["pid"] not in {r["pid"] for r in starts}
    assert told[0]["pid"] != sup.pid
    assert told[0]["attempt"] == row["attempt"]
