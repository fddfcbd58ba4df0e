"""Issue 50 (a misspelled password key) and issue 44 (a DSN that is no DSN at all): no
value of a DSN that does not parse appears in any output, whatever its keys are called:
the CLI's line, the text of ``DatabaseUnavailable`` (producers' connect and the parent's
own connections), and ``supervisor run``'s stdout, stderr and log. The line still says
what is wrong, and the DSN's form and length."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from e2e import ROOT, TESTS_DIR

from shared.db import DatabaseUnavailable, connect
from supervisor.cli.main import main
from supervisor.db.connections import open_connection

pytestmark = pytest.mark.timeout(60)

SECRET = "Zq7xK9wV2jQ"
PIECES = [SECRET[i:i + 4] for i in range(len(SECRET) - 3)]
KEYS = ["password", "passwd", "pwd", "sslpassword"]
E = "supervisor: error: invalid database DSN: "


def secret_dsns() -> list[str]:
    """Each secret-holding key, in key=value and URI form, in DSNs that fail to parse in
    different ways: an unknown key, a stray word after the value, a bad query
    parameter beside it."""
    dsns = []
    for key in KEYS:
        dsns += [
            f"host=127.0.0.1 port=1 {key}={SECRET}",              # passwd/pwd: unknown key
            f"host=127.0.0.1 {key}={SECRET} stray",               # missing '=' after a word
            f"host=127.0.0.1 {key}='{SECRET}' dbname='x",         # unterminated quote
            f"postgresql://u@127.0.0.1:1/db?{key}={SECRET}&bogus=1",
            f"postgresql://u@127.0.0.1:1/db?{key}={SECRET}",
        ]
    return dsns


def leaks(text: str) -> list[str]:
    return [piece for piece in PIECES if piece in text]


@pytest.mark.parametrize("dsn", secret_dsns())
def test_no_secret_in_the_cli_line_or_the_exception(dsn, monkeypatch):
    monkeypatch.delenv("SUPERVISOR_DSN", raising=False)
    result = CliRunner().invoke(main, ["status", "--dsn", dsn])
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("supervisor: error: ")
    assert not leaks(result.output), result.output
    with pytest.raises(DatabaseUnavailable) as caught:
        connect(dsn, connect_timeout=1)
    assert not leaks(str(caught.value)), caught.value
    with pytest.raises(DatabaseUnavailable) as caught:
        open_connection(dsn, "supervisor-test", statement_timeout=0, deadline=2)
    assert not leaks(str(caught.value)), caught.value
    import supervisor  # the producers' API

    with pytest.raises(DatabaseUnavailable) as caught:
        supervisor.enqueue("k", dsn=dsn)
    assert not leaks(str(caught.value)), caught.value


@pytest.mark.parametrize("key", ["passwd", "pwd"])
@pytest.mark.parametrize("uri", [False, True], ids=["key=value", "URI"])
def test_a_misspelled_password_key_is_named_as_a_suggestion(key, uri, monkeypatch):
    monkeypatch.delenv("SUPERVISOR_DSN", raising=False)
    dsn = (f"postgresql://u@127.0.0.1:1/db?{key}={SECRET}" if uri
           else f"host=127.0.0.1 {key}={SECRET}")
    result = CliRunner().invoke(main, ["status", "--dsn", dsn])
    form = "a URI" if uri else "key=value pairs"
    assert result.output == (
        f"{E}an unknown connection option (a key of {len(key)} characters, not shown; did "
        f'you mean "password"?) (DSN not shown: {form}, {len(dsn)} characters)\n')


def test_a_secret_key_in_a_dsn_that_parses_is_hidden_too(monkeypatch):
    """``sslpassword`` in a DSN libpq parses but cannot use (a bad sslmode): the connect
    error names the database, not the secret."""
    monkeypatch.delenv("SUPERVISOR_DSN", raising=False)
    dsn = f"host=127.0.0.1 port=1 sslmode=bogus sslpassword={SECRET} password={SECRET}"
    result = CliRunner().invoke(main, ["status", "--dsn", dsn])
    assert result.exit_code == 1 and not leaks(result.output), result.output
    assert "sslmode" in result.output


# Issue 44: SUPERVISOR_DSN holding a password alone, or something else that is no DSN.
NOT_DSNS = [
    (SECRET, "one word"),
    (f"{SECRET} and more", "3 words"),
]


@pytest.mark.parametrize(("value", "form"), NOT_DSNS, ids=["bare word", "word with spaces"])
def test_a_dsn_that_is_neither_form_says_so_without_its_value(value, form, monkeypatch):
    monkeypatch.setenv("SUPERVISOR_DSN", value)
    for command in (["status"], ["jobs", "list"], ["migrate"]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 1, result.output
        assert result.output == (
            f"{E}neither a URI (postgresql://user:password@host/db) nor key=value pairs "
            f"(host=... dbname=...) (DSN not shown: {form}, {len(value)} characters)\n")


def test_an_empty_value_is_no_dsn_and_shows_nothing(monkeypatch):
    """An empty SUPERVISOR_DSN counts as unset (DATABASE_URL is next); an empty value
    inside a DSN is reported like any other, without the rest of the DSN."""
    monkeypatch.setenv("SUPERVISOR_DSN", "")
    monkeypatch.setenv("DATABASE_URL", SECRET)
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 1 and not leaks(result.output), result.output
    assert "(DSN not shown: one word, 11 characters)" in result.output
    monkeypatch.setenv("SUPERVISOR_DSN", f"host=127.0.0.1 passwd= password={SECRET}")
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 1 and not leaks(result.output), result.output
    assert "a key of 6 characters" in result.output


@pytest.mark.slow
@pytest.mark.parametrize("dsn", [SECRET, f"host=127.0.0.1 passwd={SECRET}",
                                 f"postgresql://u@127.0.0.1/db?pwd={SECRET}"],
                         ids=["bare word", "passwd", "URI pwd"])
def test_run_prints_and_logs_no_value(dsn):
    """``supervisor run`` logs to stderr, in JSON too."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(ROOT)]),
               SUPERVISOR_DSN=dsn)
    proc = subprocess.run([sys.executable, "-m", "supervisor", "run", "--app", "e2e_handlers",
                           "--burst"], capture_output=True, text=True, env=env,
                          cwd=str(TESTS_DIR), timeout=30)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(E)
    written = proc.stdout + proc.stderr
    assert not leaks(written), written
    assert "Traceback" not in written


@pytest.mark.parametrize("key", KEYS)
def test_the_process_title_hides_every_secret_key(key):
    from shared.dsn import redact_text
    from supervisor.cli.early import _hide

    for arg in (f"--dsn=host=h {key}={SECRET} port=1", f"postgresql://u@h/db?{key}={SECRET}"):
        assert not leaks(_hide(arg, redact_text)), arg
