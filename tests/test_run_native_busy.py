"""A child busy in native code (a regular expression holding the GIL, its heartbeats
starved, its CPU time moving) is said to be so by the parent's ``ps`` title, ``status``
and ``jobs show`` while it runs, and its job completes (issue 26)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from e2e import Supervisor, job_row, wait_until

from shared.enqueue import enqueue
from supervisor.cli.main import main

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]  # real supervisors: CI lane


def title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def cli(dsn: str, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--dsn", dsn])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_regex_holding_the_gil_is_shown_busy_in_native_code_and_completes(dsn, tmp_path):
    job_id = enqueue("usage_native_regex", {"n": 27}, dsn=dsn)  # 7-14 s in one call
    config = tmp_path / "settings.toml"
    config.write_text('[tool.supervisor]\nheartbeat_interval = "0.5s"\n')
    sup = Supervisor(dsn, "--burst", "-n", "1", "--poll-interval", "0.1", "--config",
                     str(config), "--heartbeat-timeout", "2", app="usage_handlers")
    try:
        seen: dict[str, str] = {}

        def said_everywhere() -> bool:
            if "title" not in seen and "busy in native code" in title(sup.pid):
                seen["title"] = title(sup.pid)
            if "status" not in seen:
                snapshot = orjson.loads(cli(dsn, "status", "--json"))
                native = [n for s in snapshot["supervisors"] for n in s["native"]]
                if native:
                    seen["status"] = orjson.dumps(native).decode()
                    seen["text"] = cli(dsn, "status")
                    seen["show"] = cli(dsn, "jobs", "show", str(job_id))
            return len(seen) == 4 or sup.proc.poll() is not None

        wait_until(said_everywhere, timeout=60, interval=0.05,
                   what="the busy child to be shown as busy in native code")
        assert len(seen) == 4, (sorted(seen), sup.err)
        assert f"busy in native code: job {job_id}]" in seen["title"]
        (native,) = orjson.loads(seen["status"])
        assert native["job"] == job_id and native["kind"] == "usage_native_regex"
        assert f"busy in native code: job {job_id} usage_native_regex" in seen["text"]
        assert "busy:             in native code" in seen["show"]
        assert sup.wait(120) == 0, sup.err
    finally:
        sup.stop()
    row = job_row(dsn, job_id)
    assert row["state"] == "completed" and row["errors"] == [], row
    assert row["usage"]["cpu_seconds"] > 2.0  # the seconds the heartbeat was silent
