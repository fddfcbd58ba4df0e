"""``supervisor batches list|show ID``: batches made by ``enqueue_many(..., then=...)``,
their members' counts by state and their callback job."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from shared.batcheta import forecast
from shared.exitcodes import CLI_USAGE
from shared.validation import printable
from supervisor.cli.common import CliError, dsn_option, open_database, reports_errors
from supervisor.cli.format import age, since, table, to_json

# Counts come from the members (the partial index on batch_id), newest batches first.
_LIST = """
SELECT b.id, b.total, b.callback_kind, b.callback_id, b.created_at, b.finished_at,
       count(j.id) FILTER (WHERE j.state = 'completed') AS completed,
       count(j.id) FILTER (WHERE j.state = 'discarded') AS discarded,
       count(j.id) FILTER (WHERE j.state = 'cancelled') AS cancelled,
       count(j.id) AS present
FROM (SELECT * FROM supervisor.batches {where} ORDER BY id DESC LIMIT %(limit)s) AS b
LEFT JOIN supervisor.jobs j ON j.batch_id = b.id
GROUP BY b.id, b.total, b.callback_kind, b.callback_id, b.created_at, b.finished_at
ORDER BY b.id DESC
"""
_CALLBACK = "SELECT state FROM supervisor.jobs WHERE id = %s"


@click.group("batches")
def batches_group() -> None:
    """List batches, or show one with its counts and callback."""


def _rows(conn, batch_id: int | None, limit: int) -> list[dict]:
    where = "WHERE id = %(id)s" if batch_id is not None else ""
    cur = conn.execute(_LIST.format(where=where), {"id": batch_id, "limit": limit})
    names = [d.name for d in cur.description]
    rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    for row in rows:
        # Members deleted by SQL (or pruned after completing) are not pending: the batch
        # closes once the members still there are final.
        row["gone"] = row["total"] - row.pop("present")
        row["pending"] = (row["total"] - row["gone"] - row["completed"] - row["discarded"]
                          - row["cancelled"])
        row["callback_state"] = None
        if row["callback_id"] is not None:
            found = conn.execute(_CALLBACK, (row["callback_id"],)).fetchone()
            row["callback_state"] = found[0] if found else "pruned"
    return rows


@batches_group.command("list")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1),
              help="At most N batches, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@dsn_option
@reports_errors
def list_command(limit: int, as_json: bool, dsn: str | None) -> None:
    """Batches, newest first: members by state, callback and its state."""
    with open_database(dsn) as conn:
        rows = _rows(conn, None, limit)
    if as_json:
        click.echo(to_json(rows))
        return
    if not rows:
        click.echo("no batches")
        return
    now = datetime.now(UTC)
    click.echo(table(
        ["ID", "TOTAL", "PENDING", "COMPLETED", "DISCARDED", "CANCELLED", "CALLBACK",
         "CREATED"],
        [[r["id"], r["total"], r["pending"], r["completed"], r["discarded"], r["cancelled"],
          _callback(r), since(r["created_at"], now)] for r in rows]))


@batches_group.command("show")
@click.argument("batch_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the batch as JSON.")
@dsn_option
@reports_errors
def show_command(batch_id: str, as_json: bool, dsn: str | None) -> None:
    """One batch: its members' counts by state, when it closed, its callback job."""
    try:
        ident = int(batch_id)
    except ValueError:
        raise CliError(f"batch id must be a number, not {batch_id!r}", CLI_USAGE) from None
    with open_database(dsn) as conn:
        rows = _rows(conn, ident, 1)
        ahead = forecast(conn, ident) if rows else None
    if not rows:
        raise CliError(f"no batch {ident} (see `supervisor batches list`)", CLI_USAGE)
    row = rows[0]
    row["eta"] = ahead.eta if ahead else None
    if as_json:
        click.echo(to_json(row))
        return
    now = datetime.now(UTC)
    lines = [f"batch {row['id']}: {row['total']} jobs, {row['pending']} pending, "
             f"{row['completed']} completed, {row['discarded']} discarded, "
             f"{row['cancelled']} cancelled"
             + (f", {row['gone']} gone (deleted, or pruned once final)" if row["gone"] else ""),
             f"  created:  {row['created_at'].isoformat(timespec='seconds')} "
             f"({since(row['created_at'], now)})"]
    if row["finished_at"] is not None:
        lines.append(f"  finished: {row['finished_at'].isoformat(timespec='seconds')} "
                     f"({since(row['finished_at'], now)})")
    lines.append(f"  callback: {_callback(row)}")
    if row["pending"]:
        lines.append(f"  eta:      {_eta(ahead)}")
    click.echo("\n".join(lines))


def _callback(row: dict) -> str:
    if row["callback_kind"] is None:
        return "-"
    kind = printable(row["callback_kind"])
    if row["callback_id"] is None:
        return f"{kind} (when the last job is final)"
    return f"{kind} job {row['callback_id']} ({row['callback_state']})"


def _eta(ahead) -> str:
    # The forecast of shared.batcheta, with what it rests on.
    if ahead is None or ahead.eta is None:
        why = "no run time measured yet" if ahead is None or ahead.mean_run is None \
            else "no live supervisor serves its queues"
        return f"unknown ({why})"
    return (f"{age(ahead.eta)} ({ahead.left} left, {age(ahead.mean_run)} mean run, "
            f"{max(min(ahead.workers, ahead.left), ahead.running)} children)")
