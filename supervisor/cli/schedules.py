"""``supervisor schedules list|pause|resume|run``. They act on the database alone: a
pause holds for every supervisor from its next round, a resume fires from the next slot
on (slots passed while paused are not replayed), ``run`` enqueues the job at once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import click
import orjson

from shared.exitcodes import CLI_USAGE
from supervisor.cli.common import CliError, dsn_option, open_database, reports_errors
from supervisor.cli.format import since, table
from supervisor.schedules import admin


@contextmanager
def _known() -> Iterator[None]:
    try:
        yield
    except admin.UnknownSchedule as exc:
        raise CliError(f"no schedule named {exc.args[0]!r} (see `supervisor schedules list`)",
                       CLI_USAGE) from None


@click.group("schedules")
def schedules_group() -> None:
    """List schedules; pause, resume or fire one now."""


@schedules_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@dsn_option
@reports_errors
def list_command(as_json: bool, dsn: str | None) -> None:
    """Every schedule the supervisors declared: kind, expression, timezone, status
    (active, paused, orphaned), next fire, last fire and its job's state."""
    with open_database(dsn) as conn:
        rows = admin.list_schedules(conn)
    if as_json:
        click.echo(orjson.dumps(rows).decode())
        return
    if not rows:
        click.echo("no schedules: none declared by a supervisor yet")
        return
    now = datetime.now(UTC)
    click.echo(table(
        ["NAME", "KIND", "EXPRESSION", "TZ", "STATUS", "NEXT", "LAST", "LAST STATE"],
        [[r["name"], r["kind"], r["expression"], r["timezone"], r["status"],
          _when(r["next_fire"], now), _when(r["last_fire"], now),
          _last_state(r)] for r in rows]))


def _when(instant: datetime | None, now: datetime) -> str:
    if instant is None:
        return "-"
    return f"{instant.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z ({since(instant, now)})"


def _last_state(row: dict) -> str:
    if row["last_job_id"] is None:
        return "-"
    return f"{row['last_state'] or 'pruned'} (job {row['last_job_id']})"


@schedules_group.command("pause")
@click.argument("name")
@dsn_option
@reports_errors
def pause_command(name: str, dsn: str | None) -> None:
    """Stop firing NAME until resumed (jobs already enqueued are untouched)."""
    with _known(), open_database(dsn) as conn:
        was = admin.pause(conn, name)
    click.echo(f"paused schedule {name!r}" + (" (it was already paused)" if was else ""))


@schedules_group.command("resume")
@click.argument("name")
@dsn_option
@reports_errors
def resume_command(name: str, dsn: str | None) -> None:
    """Fire NAME again from its next slot on."""
    with _known(), open_database(dsn) as conn:
        was = admin.resume(conn, name)
    click.echo(f"resumed schedule {name!r}" + ("" if was else " (it was not paused)"))


@schedules_group.command("run")
@click.argument("name")
@dsn_option
@reports_errors
def run_command(name: str, dsn: str | None) -> None:
    """Enqueue NAME's job now, outside its slots (also when paused); prints the job id."""
    with _known(), open_database(dsn) as conn:
        job_id = admin.run_now(conn, name)
    click.echo(job_id)
