"""Control characters: refused in queue and kind names at enqueue (API and CLI), escaped
wherever a job's text is printed (rows inserted by plain SQL bypass the refusal)."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from shared.enqueue import enqueue, enqueue_many
from shared.validation import check_name, printable
from supervisor.cli.format import json_text, one_line, table
from supervisor.cli.main import main
from supervisor.observe.logs import TEXT_FORMAT, TextFormatter

pytestmark = pytest.mark.timeout(60)

BAD_NAMES = ["esc\x1b[31m", "new\nline", "tab\tbed", "nul\x00", "del\x7f", "csi\x9b",
             "rtl\u202eevil"]
RAW = ("\x1b", "\x9b", "\u202e", "\x07")


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("name", BAD_NAMES)
def test_check_name_refuses_control_characters(name):
    with pytest.raises(ValueError, match="control character") as info:
        check_name("queue", name)
    assert not any(c in str(info.value) for c in (*RAW, "\n", "\t"))


@pytest.mark.parametrize("name", ["images", "émoji-👍", "a.b:c/d", "x" * 255, "zwj\u200d"])
def test_check_name_accepts_ordinary_names(name):
    assert check_name("queue", name) == name


def test_printable_escapes_and_keeps_newlines_only_when_asked():
    assert printable("a\x1b[31mb\tc\nd\u202e") == "a\\e[31mb\\tc\\nd\\u202e"
    assert printable("line1\nline2\x07", keep_newlines=True) == "line1\nline2\\x07"


def test_enqueue_refuses_control_characters_in_queue_and_kind(conn):
    for name in BAD_NAMES:
        with pytest.raises(ValueError, match="control character"):
            enqueue("k", queue=name, conn=conn)
        with pytest.raises(ValueError, match="control character"):
            enqueue(name, conn=conn)
        with pytest.raises(ValueError, match="control character"):
            enqueue_many(name, [{}], conn=conn)
        with pytest.raises(ValueError, match="control character"):
            enqueue_many("k", [{}], queue=name, conn=conn)
    assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0] == 0


def test_cli_enqueue_refuses_with_one_line_exit_2(dsn, conn):
    result = invoke("enqueue", "k", "--queue", "red\x1b[31m", "--dsn", dsn)
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "\x1b" not in result.output
    assert "control character U+001B" in result.output
    assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0] == 0


def _insert_raw(conn) -> int:
    # Plain SQL cannot be refused without a schema change (a CHECK): the printers escape.
    errors = orjson.dumps([{"attempt": 1, "kind": "error", "message": "boom \x1b[2J\u202e",
                            "traceback": "Traceback\n  bell\x07\n", "at": "now",
                            "supervisor": "s\x1b"}]).decode()
    return conn.execute(
        "INSERT INTO supervisor.jobs (kind, queue, args, state, errors) "
        "VALUES (%s, %s, %s::jsonb, 'available', %s::jsonb) RETURNING id",
        ("kind\x1b[31m", "q\x1b]0;title\x07\u202e", '{"s": "\\u001b\u202e\u009b"}', errors),
    ).fetchone()[0]


def test_every_printer_escapes_raw_rows(dsn, conn):
    job_id = _insert_raw(conn)
    outputs = {
        "jobs list": invoke("jobs", "list", "--dsn", dsn),
        "jobs list --json": invoke("jobs", "list", "--json", "--dsn", dsn),
        "jobs show": invoke("jobs", "show", str(job_id), "--dsn", dsn),
        "jobs show --json": invoke("jobs", "show", str(job_id), "--json", "--dsn", dsn),
        "status": invoke("status", "--dsn", dsn),
        "status --json": invoke("status", "--json", "--dsn", dsn),
        "queues list": invoke("queues", "list", "--dsn", dsn),
        "queues list --json": invoke("queues", "list", "--json", "--dsn", dsn),
    }
    for what, result in outputs.items():
        assert result.exit_code == 0, (what, result.output)
        leaked = [c for c in RAW if c in result.output]
        assert not leaked, (what, leaked, result.output)
    assert "kind\\e[31m" in outputs["jobs list"].output
    assert "boom \\e[2J" in outputs["jobs show"].output
    # JSON stays JSON and keeps the exact text.
    rows = orjson.loads(outputs["jobs list --json"].output)
    assert rows[0]["queue"] == "q\x1b]0;title\x07\u202e"


def test_format_helpers_escape():
    assert "\x1b" not in table(["A", "B"], [["x\x1b[1m", 1]])
    assert one_line("a\x1b\nsecond") == "a\\e"
    assert json_text({"k": "\u202e\x9b\x1b"}) == '{"k":"\\u202e\\u009b\\u001b"}'


def test_text_log_lines_escape_messages():
    import logging

    record = logging.LogRecord("supervisor.jobs", logging.WARNING, __file__, 1,
                               "job %d failed: %s", (7, "bad \x1b[31m\nforged line"), None)
    line = TextFormatter(TEXT_FORMAT).format(record)
    assert "\n" not in line and "\x1b" not in line
    assert "bad \\e[31m\\nforged line" in line


@pytest.mark.slow
def test_a_real_run_logs_a_hostile_error_message_escaped(dsn, conn):
    from e2e import run_burst

    job_id = enqueue("edges_fail_escape", max_attempts=1, conn=conn)
    sup = run_burst(dsn, "-n", "1", "--app", "edges_handlers")
    assert "edges_fail_escape" in sup.err
    assert "\x1b" not in sup.err and "\u202e" not in sup.err, sup.err
    assert "bad \\e[31mred\\e[0m \\u202etxt.exe" in sup.err, sup.err
    shown = invoke("jobs", "show", str(job_id), "--dsn", dsn)
    assert "\x1b" not in shown.output and "\u202e" not in shown.output
    assert "bad \\e[31mred" in shown.output
