"""``supervisor dashboard``: serve the web dashboard in this process (never inside a
supervisor parent). Needs the ``dashboard`` extra; without it, one line says how to
install it."""

from __future__ import annotations

import click

from shared.exitcodes import CLI_USAGE
from supervisor.cli.common import (
    CliError,
    dsn_option,
    open_database,
    quiet_stop_signals,
    reports_errors,
    resolve_cli_dsn,
)

EXTRA_MODULES = {"starlette", "uvicorn", "jinja2"}
INSTALL_HINT = "pip install 'pg-supervisor[dashboard]'"
MIN_TOKEN = 16


@click.command("dashboard")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback exposes job data.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to listen on (0: any free port, printed at start).")
@click.option("--refresh", type=click.FloatRange(min=0), default=3.0, show_default=True,
              metavar="SECONDS", help="How often pages refresh themselves (0: never).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="Also answer requests for this Host name (a reverse proxy's), "
                   "when listening on loopback. Repeatable.")
@dsn_option
@reports_errors
def dashboard_command(host: str, port: int, refresh: float, allowed_hosts: tuple[str, ...],
                      dsn: str | None) -> None:
    """Serve a web dashboard over the queue's database: queues, jobs, supervisors.
    Actions (retry, cancel, pause, resume) need SUPERVISOR_DASHBOARD_TOKEN set here and
    sent by the client; without it the dashboard is read-only."""
    try:
        import supervisor.dashboard as dashboard
    except ModuleNotFoundError as exc:
        if exc.name not in EXTRA_MODULES:
            raise
        raise CliError(f"the dashboard needs its extra ({exc.name} is missing): "
                       f"{INSTALL_HINT}") from None
    url = resolve_cli_dsn(dsn)
    with open_database(url):
        pass  # fails now, in one line, if the database is unreachable or unmigrated
    token = dashboard.token_from_env()
    read_token = dashboard.token_from_env(name=dashboard.READ_TOKEN_ENV)
    if not dashboard.is_loopback(host) and token is None and read_token is None:
        raise CliError(f"listening on {host} (not loopback) needs a token for reads: set "
                       f"{dashboard.READ_TOKEN_ENV} (or {dashboard.TOKEN_ENV})", CLI_USAGE)
    try:
        sock = dashboard.listen(host, port)
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound_port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    mode = ("actions need the token" if token
            else f"read-only ({dashboard.TOKEN_ENV} is not set)")
    if not dashboard.is_loopback(host):
        click.echo(f"supervisor: listening on {host}: every request needs a token (HTTP "
                   "Basic password or Authorization: Bearer); use TLS in front of it",
                   err=True)
    if token is not None and len(token) < MIN_TOKEN:
        click.echo(f"supervisor: warning: {dashboard.TOKEN_ENV} has {len(token)} characters; "
                   f"use at least {MIN_TOKEN} random ones", err=True)
    app = dashboard.create_app(url, dashboard.Settings(token=token, refresh=refresh,
                                                       read_token=read_token),
                               host=host, allowed_hosts=allowed_hosts)
    with quiet_stop_signals():  # SIGTERM exits 0, Ctrl-C 130; never 143 or Aborted!
        # Said once it serves (``serve``'s ``ready``): a stop after it is a clean one.
        dashboard.serve(app, sock, ready=lambda: click.echo(
            f"supervisor dashboard on http://{shown}:{bound_port}/ ({mode})", err=True))
