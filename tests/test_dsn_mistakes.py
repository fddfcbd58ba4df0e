"""The DSN mistakes a new user makes each get one exact line naming the mistake, and no
piece of the password appears in any output: the CLI's, ``supervisor run``'s (stdout,
stderr and its log), the producers' connect errors and the process title."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from e2e import ROOT, TESTS_DIR

from shared.db import DatabaseUnavailable, connect
from shared.dsn import describe, redact, redact_text, scrub
from supervisor.cli.early import _hide
from supervisor.cli.main import main

pytestmark = pytest.mark.timeout(60)

SECRET = "s3cretPW"
PIECES = [SECRET, "s3cret", "retPW", "ss3cretPW"]
E = "supervisor: error: invalid database DSN: "
URI_HINT = "a URI needs '://' after the scheme: postgresql://user:password@host/db"
RAW_AT = "a raw '@' or '/' in the URI's user or password: write them as %40 and %2F"
NEITHER = ("neither a URI (postgresql://user:password@host/db) nor key=value pairs "
           "(host=... dbname=...)")


def shown(form: str, dsn: str) -> str:
    """What a message says of a DSN that does not parse: its form and length only."""
    return f"(DSN not shown: {form}, {len(dsn)} characters)"


# (the DSN as typed, the one line ``supervisor status --dsn`` prints)
_TYPED = [
    ("postgresql:/postgres:s3cretPW@127.0.0.1/newc_ex", URI_HINT, "a URI"),  # one slash
    ("postgresql://postgres:p@ss3cretPW@127.0.0.1:5432/x", RAW_AT, "a URI"),  # raw '@'
    ("postgresql://u:s3c/retPW@127.0.0.1/db", RAW_AT, "a URI"),  # a raw '/'
    ("postgres:s3cretPW@127.0.0.1/db", URI_HINT, "a URI"),  # no scheme at all
    ("u:s3cretPW@127.0.0.1:1/db", URI_HINT, "a URI"),
    ("postgresql//u:s3cretPW@127.0.0.1/db", NEITHER, "one word"),  # no colon after scheme
    ("'postgresql://u:s3cretPW@127.0.0.1:1/db'",  # shell quotes kept
     "the DSN is quoted: remove the quotes", "a URI"),
    (" postgresql://u:s3cretPW@127.0.0.1:1/db", "spaces around the DSN: remove them",
     "a URI"),
    ("postgresql://u:s3cretPW",  # '@host' forgotten: libpq reads the password as a port
     "the URI's port is not a number: is '@host' missing?", "a URI"),
    ("host=127.0.0.1 password=s3c retPW port=1",  # a space in an unquoted password
     'missing "=" after <5 characters> in connection info string', "key=value pairs"),
]
MISTAKES = [(dsn, f"{E}{problem} {shown(form, dsn)}") for dsn, problem, form in _TYPED]


@pytest.mark.parametrize(("dsn", "line"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_mistake_is_one_exact_line_without_the_password(dsn, line, monkeypatch):
    monkeypatch.delenv("SUPERVISOR_DSN", raising=False)
    for command in (["status"], ["jobs", "list"], ["enqueue", "k"]):
        result = CliRunner().invoke(main, [*command, "--dsn", dsn])
        assert result.exit_code == 1, result.output
        assert result.output == line + "\n"
    with pytest.raises(DatabaseUnavailable) as caught:
        connect(dsn, connect_timeout=1)
    assert f"supervisor: error: {caught.value}" == line
    assert not any(piece in redact_text(dsn) for piece in PIECES)
    assert not any(piece in _hide(dsn, redact_text) for piece in PIECES)
    assert not any(piece in describe(dsn) for piece in PIECES)
    assert not any(piece in redact(dsn) for piece in PIECES)


@pytest.mark.parametrize("dsn", [
    "postgresql://u:s3cretPW@127.0.0.1:1/db?application_name=a@b",  # '@' in a query value
    "postgresql://u:s3c%40retPW@127.0.0.1:1/db",  # escaped as the hint says
])
def test_dsns_that_parse_are_not_refused(dsn):
    with pytest.raises(DatabaseUnavailable) as caught:
        connect(dsn, connect_timeout=1)
    assert str(caught.value) == ("cannot connect to PostgreSQL at 127.0.0.1:1/db: connection "
                                 'failed: connection to server at "127.0.0.1", port 1 '
                                 "failed: Connection refused")


def test_scrub_hides_quoted_pieces_of_the_password():
    dsn = "postgresql://u:s3c?retPW@[::1/x"
    message = scrub('invalid "retPW@[::1" near \'s3c?r\'', dsn)
    assert not any(piece in message for piece in ["retPW", "s3c?r"]), message


@pytest.mark.slow
@pytest.mark.parametrize("dsn", [MISTAKES[0][0], MISTAKES[1][0], MISTAKES[9][0]])
def test_run_prints_and_logs_no_password(dsn, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(ROOT)]))
    env.pop("SUPERVISOR_DSN", None)
    log = tmp_path / "run.log"
    proc = subprocess.run([sys.executable, "-m", "supervisor", "run", "--app", "e2e_handlers",
                           "--burst", "--dsn", dsn], capture_output=True, text=True, env=env,
                          cwd=str(TESTS_DIR), timeout=30)
    log.write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == dict(MISTAKES)[dsn]
    assert not any(piece in log.read_text() for piece in PIECES)
