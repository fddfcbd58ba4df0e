"""``supervisor kinds list|pause|resume``: job kinds paused on every supervisor, by the
circuit breaker (too many crashes within breaker_window) or by hand. A pause is read by
each supervisor at its next poll; resuming also forgets the kind's recent crashes."""

from __future__ import annotations

import click

from shared.units import parse_duration
from shared.validation import check_name
from supervisor.breaker import admin as breaker_admin
from supervisor.cli.common import CliError, dsn_option, open_database, reports_errors
from supervisor.cli.format import json_text, table


@click.group("kinds")
def kinds_group() -> None:
    """Job kinds paused by the circuit breaker or by hand; pause and resume them."""


@kinds_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@dsn_option
@reports_errors
def list_command(as_json: bool, dsn: str | None) -> None:
    """Every kind with a pause: paused now or not, why, and until when."""
    with open_database(dsn) as conn:
        rows = breaker_admin.list_kinds(conn)
    if as_json:
        click.echo(json_text(rows))
    elif not rows:
        click.echo("no kind is paused")
    else:
        click.echo(table(["KIND", "PAUSED", "UNTIL", "WHY"],
                         [[r["kind"], "paused" if r["paused"] else "-",
                           str(r["paused_until"] or "resumed by hand"), r["reason"]]
                          for r in rows]))


@kinds_group.command("pause")
@click.argument("kind")
@click.option("--for", "duration", default=None, metavar="DURATION",
              help="Resume by itself after this long (30s, 5m); default: until resumed.")
@dsn_option
@reports_errors
def pause_command(kind: str, duration: str | None, dsn: str | None) -> None:
    """Start no job of KIND on any supervisor; running ones finish."""
    try:
        check_name("job kind", kind)
        seconds = parse_duration(duration, "--for") if duration is not None else None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if seconds is not None and seconds <= 0:
        raise CliError("--for: expected a duration above 0")
    with open_database(dsn) as conn:
        breaker_admin.pause_kind(conn, kind, seconds)
    until = f"for {duration}" if duration else "until `supervisor kinds resume`"
    click.echo(f"paused kind {kind!r} on every supervisor {until}")


@kinds_group.command("resume")
@click.argument("kind")
@dsn_option
@reports_errors
def resume_command(kind: str, dsn: str | None) -> None:
    """Start jobs of KIND again (supervisors learn it at their next poll)."""
    with open_database(dsn) as conn:
        was = breaker_admin.resume_kind(conn, kind)
    click.echo(f"resumed kind {kind!r}" + ("" if was else " (it was not paused)"))
