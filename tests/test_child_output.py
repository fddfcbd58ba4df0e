"""A handler's stdout and stderr never reach the supervisor's log stream unmarked
(issue 19): with ``--log-format json`` every line on stderr parses as JSON and a
handler's lines carry ``job_id``, ``kind`` and ``stream``; in text they are prefixed with
the job. Lines belong to the job that wrote them, including a subprocess's."""

from __future__ import annotations

import json

import psycopg
import pytest
from e2e import run_burst

from shared.enqueue import enqueue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

APP = ("--app", "childfaults_handlers")


def _enqueue_prints(dsn: str, tags: list[str]) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {tag: enqueue("cf_print", {"tag": tag}, conn=conn) for tag in tags}


def test_json_log_stream_carries_handler_output_as_tagged_json_lines(dsn):
    ids = _enqueue_prints(dsn, [f"t{i}" for i in range(6)])
    sup = run_burst(dsn, "-n", "2", "--log-format", "json", *APP)
    lines = [line for line in sup.err.splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # every line, or this raises
    output = [e for e in entries if e.get("logger") == "supervisor.output"]
    for tag, job_id in ids.items():
        mine = {(e["stream"], e["message"]) for e in output if e.get("job_id") == job_id}
        assert mine == {
            ("stdout", f"printed {tag}"),
            ("stderr", f"to stderr {tag}"),
            ("stdout", f"partial line without newlineraw fd write {tag}"),
            ("stdout", f"from a subprocess {tag}"),
            ("stderr", f"sub err {tag}"),
            ("stderr", '\x1b[31mred\x1b[0m and {"not": json'),
        }, (tag, [e for e in output if e.get("job_id") == job_id])
        assert all(e["kind"] == "cf_print" for e in output if e.get("job_id") == job_id)
    # No line of one job is attributed to another: each carries its own tag.
    for e in output:
        tag = next(t for t, i in ids.items() if i == e["job_id"])
        assert tag in e["message"] or "red" in e["message"], e


def test_text_log_stream_prefixes_handler_output_with_its_job(dsn):
    ids = _enqueue_prints(dsn, ["solo"])
    sup = run_burst(dsn, "-n", "1", *APP)
    job_id = ids["solo"]
    assert f"[job {job_id} cf_print stdout] printed solo" in sup.err
    assert f"[job {job_id} cf_print stderr] sub err solo" in sup.err
    # The escape sequence is shown, never sent to the terminal.
    assert "\x1b" not in sup.err
    assert f"[job {job_id} cf_print stderr] \\e[31mred\\e[0m" in sup.err
    assert "printed solo" not in sup.out


def test_the_child_runtimes_own_messages_are_json_too(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = enqueue("cf_replace_answer_pipe", {}, max_attempts=1, conn=conn)
    sup = run_burst(dsn, "-n", "1", "--log-format", "json", *APP)
    entries = [json.loads(line) for line in sup.err.splitlines() if line.strip()]
    said = [e for e in entries if e.get("logger") == "supervisor.child"]
    assert said and "replaced the pipe to the parent" in said[0]["message"], entries
    assert any(e.get("job_id") == job_id for e in entries)
