"""The dashboard's web application (Starlette) and how it is served (uvicorn).

Why these: Starlette is a small, well-kept ASGI toolkit (routing, static files,
middleware) without an ORM or a template dialect of its own to learn; uvicorn is its
usual server, and our supervisor's process model follows uvicorn's own; Jinja2
templates escape every value by default. The dashboard runs in its own process,
never inside the forking supervisor parent.

Every answer carries a Content-Security-Policy that allows only the package's own
script and stylesheet, so even a value that escaped escaping could not run. Bound to
loopback, the app answers only requests whose Host is a loopback name, so a web page
that rebinds its DNS name to 127.0.0.1 cannot read it; bound elsewhere, every request
needs a token (see ``auth``).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from supervisor.admin import AdminError, batch_actions
from supervisor.dashboard import actions, metrics, views
from supervisor.dashboard.auth import ReadGate, Refused
from supervisor.dashboard.counts import FinishedCounts
from supervisor.dashboard.database import DashboardDB, DatabaseDown
from supervisor.dashboard.queries import NotFound
from supervisor.dashboard.render import JSONResponse, page

log = logging.getLogger("supervisor.dashboard")
STATIC = Path(__file__).parent / "static"
LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]
SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
     b"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


@dataclass(frozen=True)
class Settings:
    """What the app is started with: the operator token (None: read-only) and how
    often the pages refresh themselves (seconds; 0 turns it off)."""

    token: str | None
    refresh: float = 3.0
    read_token: str | None = None


class SecurityHeaders:
    """ASGI middleware adding ``SECURITY_HEADERS`` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _error(request: Request, status: int, message: str,
           down_since: datetime | None = None) -> Response:
    if actions.wants_json(request):
        extra = {"down_since": down_since} if down_since else {}
        return JSONResponse({"error": message, **extra}, status_code=status)
    return page(request, "error.html", status_code=status, title=f"Error {status}",
                status=status, message=message,
                down_since=down_since.isoformat() if down_since else None)


async def _admin_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, NotFound | batch_actions.UnknownBatch):
        return _error(request, 404, str(exc))
    return _error(request, 400 if getattr(exc, "usage", False) else 409, str(exc))


async def _refused(request: Request, exc: Exception) -> Response:
    return _error(request, 403, str(exc))


async def _database_down(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DatabaseDown)
    return _error(request, 503, str(exc), exc.since)


async def _unexpected(request: Request, exc: Exception) -> Response:
    # A bug, not the user's doing: the traceback goes to the log, one line to the page.
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return _error(request, 500, f"the dashboard failed: {type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else ''}")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(request, exc.status_code, str(exc.detail))


def is_loopback(host: str) -> bool:
    """True when ``host`` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def create_app(dsn: str, settings: Settings, *, host: str = "127.0.0.1",
               allowed_hosts: tuple[str, ...] = ()) -> Starlette:
    """The dashboard app over database ``dsn``, as served on ``host``. Bound to
    loopback it answers only loopback Host names plus ``allowed_hosts`` (the name a
    reverse proxy passes on); bound elsewhere it answers any Host name, but only
    requests that carry the read token or the operator token (``ReadGate``)."""
    db = DashboardDB(dsn)
    loopback = is_loopback(host)
    allowed = [*LOOPBACK_NAMES, host, *allowed_hosts] if loopback else ["*"]
    gate = [] if loopback else [Middleware(
        ReadGate, tokens=tuple(t for t in (settings.read_token, settings.token) if t))]
    app = Starlette(
        routes=[*views.ROUTES, *actions.ROUTES, *metrics.ROUTES,
                Mount("/static", StaticFiles(directory=STATIC), name="static")],
        middleware=[Middleware(SecurityHeaders),
                    Middleware(TrustedHostMiddleware, allowed_hosts=allowed), *gate],
        exception_handlers={AdminError: _admin_error, Refused: _refused,
                            DatabaseDown: _database_down, HTTPException: _http_error,
                            500: _unexpected},
    )
    app.state.db = db
    app.state.finished = FinishedCounts()
    app.state.settings = settings
    return app


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (port 0: any free one). ``OSError``
    when the address is taken or cannot be bound."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class _AnnouncingServer(uvicorn.Server):
    """uvicorn's server, saying so once it serves: by then its own signal handlers
    are in place, so a stop that follows the announcement is a clean shutdown. Said
    before, a SIGTERM could land while asyncio was still building its loop, and the
    half-built loop printed a traceback as it was collected (one CI run)."""

    def __init__(self, config: uvicorn.Config, ready: Callable[[], None] | None) -> None:
        super().__init__(config)
        self.ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self.ready is not None:
            self.ready()


def serve(app: Starlette, sock: socket.socket, *, log_level: str = "info",
          ready: Callable[[], None] | None = None) -> None:
    """Serve ``app`` on the bound ``sock`` until SIGINT or SIGTERM; ``ready`` is called
    once it serves."""
    # A page's request is cheap and its refresh comes again: do not let an open
    # keep-alive connection hold a shutdown for long.
    config = uvicorn.Config(app, log_level=log_level, access_log=False,
                            server_header=False, proxy_headers=False,
                            timeout_graceful_shutdown=3)
    _AnnouncingServer(config, ready).run(sockets=[sock])
