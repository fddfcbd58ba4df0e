"""The last checkpoint's time and size in ``supervisor jobs show`` and on the dashboard's
job page (issue 28), and the checkpoint rules that need no supervisor: a bad
``@job(on_stop=...)`` is refused at import, states are checked in the handler."""

from __future__ import annotations

import urllib.request

import orjson
import pytest
from click.testing import CliRunner
from dashboard_seed import DashboardProcess

from shared import wire
from shared.enqueue import enqueue
from supervisor.cli.main import main
from workers import job
from workers.context import JobContext

STATE = {"done": 41, "path": "part-0041.parquet"}


def _checkpointed(conn) -> int:
    job_id = enqueue("ck_batch", conn=conn)
    conn.execute("UPDATE supervisor.jobs SET checkpoint = %s::jsonb, "
                 "checkpoint_at = now() - interval '90 seconds' WHERE id = %s",
                 (orjson.dumps(STATE).decode(), job_id))
    return job_id


def _size(conn, job_id) -> int:
    return conn.execute("SELECT octet_length(checkpoint::text) FROM supervisor.jobs "
                        "WHERE id = %s", (job_id,)).fetchone()[0]


def test_jobs_show_gives_the_last_checkpoints_size_and_time(dsn, conn):
    job_id = _checkpointed(conn)
    result = CliRunner().invoke(main, ["jobs", "show", str(job_id), "--dsn", dsn])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if "checkpoint:" in x)
    assert f"{_size(conn, job_id)} bytes, written" in line and "ago" in line
    shown = orjson.loads(CliRunner().invoke(
        main, ["jobs", "show", str(job_id), "--json", "--dsn", dsn]).output)
    assert shown["checkpoint"] == STATE and shown["checkpoint_bytes"] == _size(conn, job_id)


@pytest.mark.slow
def test_the_dashboards_job_page_gives_the_last_checkpoints_size_and_time(dsn, conn):
    job_id = _checkpointed(conn)
    plain = enqueue("ck_batch", conn=conn)
    server = DashboardProcess(dsn, None)
    try:
        with urllib.request.urlopen(f"{server.url}/jobs/{job_id}") as page:
            html = page.read().decode()
        with urllib.request.urlopen(f"{server.url}/jobs/{plain}") as page:
            bare = page.read().decode()
    finally:
        server.close()
    assert 'id="checkpoint"' in html and f"{_size(conn, job_id)} bytes" in html
    assert 'id="checkpoint"' not in bare  # no checkpoint, no line


def test_on_stop_takes_flag_or_raise_and_refuses_anything_else():
    with pytest.raises(ValueError, match="on_stop must be 'flag' or 'raise', not 'kill'"):
        job(name="ck_bad_on_stop", on_stop="kill")(lambda: None)


def test_a_refused_state_stores_nothing_and_an_accepted_one_is_sent_as_json():
    sent: list[tuple[bytes, bool]] = []
    ctx = JobContext(id=7, kind="k", queue="q", attempt=1, args={}, _checkpoint_cap=32,
                     _send_checkpoint=lambda data, flush: sent.append((data, flush)))
    with pytest.raises(ValueError, match="is 40 bytes of JSON, over the 32-byte cap"):
        ctx.checkpoint({"x": "y" * 32})
    with pytest.raises(ValueError, match="cannot be encoded as JSON"):
        ctx.checkpoint({1j})
    with pytest.raises(ValueError, match="holds a NUL character"):
        ctx.checkpoint({"s": "a\x00b"})  # PostgreSQL's jsonb refuses it
    assert sent == [] and ctx.last_checkpoint is None
    ctx.checkpoint({"s": "a\\u0000"})  # a backslash, then the text u0000: fine
    sent.clear()
    ctx.checkpoint({"done": 3}, flush=True)
    assert sent == [(b'{"done":3}', True)] and ctx.last_checkpoint == {"done": 3}


def test_checkpoint_and_notice_frames_round_trip():
    reader = wire.FrameReader()
    data = (wire.Checkpoint(5, b'{"a":1}', True).encode() + wire.Checkpointed(5).encode()
            + wire.Checkpointed(6, False).encode() + wire.Stopping(7, "cancel").encode()
            + wire.Run.pack(8, "k", "q", 1, 3, "{}", None, '{"done":2}'))
    frames = reader.feed(data)
    assert [wire.decode(f) for f in frames[:4]] == [
        wire.Checkpoint(5, b'{"a":1}', True), wire.Checkpointed(5, True),
        wire.Checkpointed(6, False), wire.Stopping(7, "cancel")]
    assert wire.Run.decode(frames[4]).resume == {"done": 2}
    assert wire.Run.decode(reader.feed(wire.Run.pack(9, "k", "q", 1, 3, "{}"))[0]).resume is None
