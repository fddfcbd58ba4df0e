"""Who may act: the operator token from ``SUPERVISOR_DASHBOARD_TOKEN``.

Reading is open to whoever can reach the port while it binds loopback (the Host check
keeps DNS-rebinding pages out). Bound to any other address it answers any Host name, so
every request but the static files then needs a token too: ``SUPERVISOR_DASHBOARD_READ_TOKEN``
(reads only) or the operator token, as ``Authorization: Bearer <token>`` or as the
password of HTTP Basic authentication (any user name; browsers ask for it once and the
browser never sends it to a rebinding page's origin). ``supervisor dashboard`` refuses to
listen on such an address with neither variable set.

Actions (retry, cancel, pause, resume) need the operator token, sent as
``Authorization: Bearer <token>`` or ``X-Supervisor-Token: <token>`` (scripts; the
latter works beside a proxy's own ``Authorization``) or as the ``token`` field of the
posted form (the pages; a proxy's Basic authentication, which the browser adds to every
request, does not hide it). Without the variable set, every action is refused: the
dashboard is read-only.

Why a form field is CSRF-safe here: the dashboard sets no cookie and never puts the
token in a page, so a form posted from another site cannot carry it. The pages keep
the token the operator typed in the tab's ``sessionStorage`` and copy it into the form
when it is submitted; the browser never sends it on its own.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os

from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN_ENV = "SUPERVISOR_DASHBOARD_TOKEN"
TOKEN_HEADER = "x-supervisor-token"  # an action's token beside any Authorization header
READ_TOKEN_ENV = "SUPERVISOR_DASHBOARD_READ_TOKEN"
READ_REFUSED = (b"this dashboard needs a token for reads: HTTP Basic (any user name, the "
                b"token as password) or Authorization: Bearer <token>\n")


class Refused(Exception):
    """An action asked without the right token (or on a read-only dashboard)."""


def token_from_env(environ: dict[str, str] | None = None, name: str = TOKEN_ENV) -> str | None:
    """The configured token (of variable ``name``: the operator token by default), or
    None (read-only, or reads open) when the variable is unset or blank."""
    value = (environ if environ is not None else os.environ).get(name, "").strip()
    return value or None


def offered_read_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization`` header: a Bearer token or the password of HTTP
    Basic authentication; else None."""
    token = bearer(authorization)
    if token is not None or not authorization:
        return token
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return decoded.partition(":")[2] or None


class ReadGate:
    """ASGI middleware for a dashboard bound to a non-loopback address: every request
    but ``/static/`` needs one of ``tokens`` (see the module docstring), else 401 with
    a Basic challenge so a browser asks for it."""

    def __init__(self, app: ASGIApp, tokens: tuple[str, ...]) -> None:
        self.app = app
        self.tokens = [token.encode() for token in tokens if token]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/static/"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        raw = headers.get(b"authorization")
        offered = offered_read_token(raw.decode("latin-1") if raw else None)
        if offered is not None and any(hmac.compare_digest(offered.encode(), token)
                                       for token in self.tokens):
            await self.app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"www-authenticate", b'Basic realm="supervisor dashboard", charset="UTF-8"')]})
        await send({"type": "http.response.body", "body": READ_REFUSED})


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def check(expected: str | None, offered: str | None) -> None:
    """Return quietly when ``offered`` is the configured token; else ``Refused`` with a
    one-line reason. Compared in constant time."""
    if expected is None:
        raise Refused(f"this dashboard is read-only: {TOKEN_ENV} is not set where it runs")
    if not offered:
        raise Refused("this action needs the dashboard token (Authorization: Bearer "
                      "<token>, X-Supervisor-Token: <token>, or the token field of the page)")
    if not hmac.compare_digest(offered.encode(), expected.encode()):
        raise Refused("wrong dashboard token")
