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


_LOUD = """
import os, sys
from workers import output
capture = output.install("text", keep=1000)
capture.begin(7, "loud")
for _ in range(5000):
    sys.stdout.write("x" * 999 + "\\n")  # 5 MB in lines
os.write(1, b"y" * 300_000)  # and a line with no end
capture.end()
os.write(capture.target, f"kept {len(capture.take())}\\n".encode())
capture.begin(8, "quiet")
print("after the loud one")
capture.end()
"""


def test_the_log_gets_a_bounded_part_of_a_loud_jobs_output():
    """Issue 50: a handler printing megabytes puts at most ``LOG_LIMIT`` bytes of it
    (plus the tags) into the supervisor's log, then one line saying how much was left
    out; the job still keeps its own tail, and the next job's budget is fresh."""
    import subprocess
    import sys

    from e2e import ROOT

    from workers.output import LOG_LIMIT

    proc = subprocess.run([sys.executable, "-c", _LOUD], capture_output=True, timeout=60,
                          cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = proc.stderr.decode()
    assert len(log) < 2 * LOG_LIMIT, len(log)
    written = 5000 * 1000 + 300_000
    logged = sum(len(line.split("] ", 1)[1]) for line in log.splitlines()
                 if line.startswith("[job 7 loud stdout] "))  # long lines: several records
    assert LOG_LIMIT - 2000 <= logged <= LOG_LIMIT
    assert (f"[job 7 loud stderr] ... {written - LOG_LIMIT} more bytes of output not "
            f"written to this log (at most {LOG_LIMIT} bytes of a job's output are; the "
            "job keeps its last 1000 bytes)") in log
    assert "kept 1000" in log
    assert "[job 8 quiet stdout] after the loud one" in log
