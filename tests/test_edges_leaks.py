"""A DSN's password is never printed, whether libpq can parse the DSN or not, and is
hidden from ``ps`` while ``supervisor run`` starts."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from e2e import ROOT, TESTS_DIR, wait_until
from psycopg.conninfo import make_conninfo

from shared.dsn import parse_problem, passwords, redact, redact_text, scrub
from supervisor.cli.main import main

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]  # processes or waits: CI lane

SECRET = "s3cretPW"
BAD_DSNS = [
    f"postgresql://u:{SECRET}@[::1/x",                 # unclosed IPv6 bracket
    f"postgresql://u:{SECRET}%zz@h/db",                # bad % escape
    f"postgresql://u:{SECRET}%@h/db",                  # truncated % escape
    f"postgresql+psycopg2://u:{SECRET}@h/db",          # SQLAlchemy-style URL
    f"host=h password={SECRET} dbname='x",             # unterminated quote
    f"postgresql://h/db?password={SECRET}&bogus=1",    # bad query parameter
    f"postgresql://u:{SECRET}@127.0.0.1:1/db",         # parses, nothing listens
    f"host=127.0.0.1 port=1 password={SECRET}",        # key=value, nothing listens
]
COMMANDS = [("status",), ("migrate",), ("enqueue", "k"), ("jobs", "list"),
            ("jobs", "show", "1"), ("queues", "list"), ("queues", "pause", "q")]


@pytest.mark.parametrize("dsn", BAD_DSNS)
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_cli_never_prints_the_password(dsn, command, monkeypatch):
    monkeypatch.delenv("SUPERVISOR_DSN", raising=False)
    result = CliRunner().invoke(main, [*command, "--dsn", dsn])
    assert result.exit_code == 1, result.output
    assert SECRET not in result.output
    assert result.output.startswith("supervisor: error: ") and result.output.count("\n") == 1


@pytest.mark.parametrize("dsn", BAD_DSNS[:4])
def test_env_dsn_is_not_printed_either(dsn, monkeypatch):
    monkeypatch.setenv("SUPERVISOR_DSN", dsn)
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 1 and SECRET not in result.output


@pytest.mark.parametrize("dsn", [BAD_DSNS[1], BAD_DSNS[3]])
def test_run_process_never_prints_the_password(dsn):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(ROOT)]))
    env.pop("SUPERVISOR_DSN", None)
    proc = subprocess.run([sys.executable, "-m", "supervisor", "run", "--app", "e2e_handlers",
                           "--burst", "--dsn", dsn], capture_output=True, text=True, env=env,
                          cwd=str(TESTS_DIR), timeout=30)
    assert proc.returncode == 1, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_parse_problems_name_the_cause_without_the_dsn():
    assert "SQLAlchemy" in parse_problem(f"postgresql+psycopg2://u:{SECRET}@h/db")
    assert "%-escape" in parse_problem(f"postgresql://u:{SECRET}%zz@h/db")
    assert parse_problem("postgresql://u:pw@h/db") is None


@pytest.mark.parametrize("dsn", BAD_DSNS)
def test_redaction_finds_the_password_parsed_or_not(dsn):
    assert any(SECRET in p for p in passwords(dsn))
    assert SECRET not in redact(dsn) and SECRET not in redact_text(dsn)
    assert SECRET not in scrub(f'could not parse "{dsn}" near "{SECRET}"', dsn)


def test_hide_passwords_covers_both_option_forms():
    from supervisor.cli.early import _hide

    for arg in (f"--dsn=postgresql://u:{SECRET}@h/db", f"--dsn=host=h password={SECRET}",
                f"postgresql://u:{SECRET}@h/db", f"host=h password='{SECRET}' port=1"):
        assert SECRET not in _hide(arg, redact_text), arg


@pytest.mark.parametrize("joined", [False, True], ids=["--dsn X", "--dsn=X"])
def test_process_title_hides_the_password_during_start(dsn, joined):
    """While the app module is being imported (the CLI and its set-up done, the arbiter
    not started), /proc/<pid>/cmdline, which ps shows every user, has no password."""
    with_password = make_conninfo(dsn, password=SECRET)  # trust auth ignores it
    gate = Path(tempfile.mkdtemp(prefix="edges-gate-")) / "go"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(ROOT)]),
               EDGES_GATE=str(gate))
    env.pop("SUPERVISOR_DSN", None)
    dsn_args = [f"--dsn={with_password}"] if joined else ["--dsn", with_password]
    proc = subprocess.Popen([sys.executable, "-m", "supervisor", "run", "--app",
                             "edges_handlers", "--burst", *dsn_args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=str(TESTS_DIR))
    try:
        wait_until(lambda: Path(f"{gate}.importing").exists(), timeout=30,
                   what="the app import")
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
        assert SECRET not in cmdline
        assert "password=***" in cmdline
        gate.touch()
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert SECRET not in out + err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
