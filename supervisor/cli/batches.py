"""``supervisor batches list|show|cancel|retry|pause|resume|priority ID``: batches made by
``enqueue_many(..., then=...)``, their members' counts by state and their callback job, and
the actions on a batch as one thing (``shared.batches_actions``)."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from shared import batches_actions
from shared.batches_actions import ActionResult, BatchActionRefused
from shared.batcheta import forecast
from shared.costs import batch_cost
from shared.exitcodes import CLI_USAGE
from shared.validation import printable
from supervisor.cli.common import CliError, dsn_option, open_database, reports_errors
from supervisor.cli.format import age, since, table, to_json

# Counts come from the members (the partial index on batch_id), newest batches first.
_LIST = """
SELECT b.id, b.total, b.callback_kind, b.callback_id, b.created_at, b.finished_at,
       b.stop_kind AS stopped, b.stop_reason AS reason, b.paused_at IS NOT NULL AS paused,
       b.max_failures, b.max_failure_rate, b.failures,
       b.on_failure ->> 'kind' AS on_failure_kind, b.called_on_failure,
       count(j.id) FILTER (WHERE j.state = 'completed') AS completed,
       count(j.id) FILTER (WHERE j.state = 'discarded') AS discarded,
       count(j.id) FILTER (WHERE j.state = 'cancelled') AS cancelled,
       count(j.id) AS present
FROM (SELECT * FROM supervisor.batches {where} ORDER BY id DESC LIMIT %(limit)s) AS b
LEFT JOIN supervisor.jobs j ON j.batch_id = b.id
GROUP BY b.id, b.total, b.callback_kind, b.callback_id, b.created_at, b.finished_at,
         b.stop_kind, b.stop_reason, b.paused_at, b.max_failures, b.max_failure_rate,
         b.failures, b.on_failure, b.called_on_failure
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
    """One batch: its members' counts by state, when it closed, its callback job, and
    whether it was cancelled, aborted by its failure budget or is paused."""
    ident = _batch_id(batch_id)
    with open_database(dsn) as conn:
        rows = _rows(conn, ident, 1)
        ahead = forecast(conn, ident) if rows else None
        spent = batch_cost(conn, ident) if rows else None
    if not rows:
        raise CliError(f"no batch {ident} (see `supervisor batches list`)", CLI_USAGE)
    row = rows[0]
    row["aborted"] = row["stopped"] == "aborted"
    row["eta"] = ahead.eta if ahead else None
    row["cost"] = spent.as_dict() if spent else None
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
    if row["on_failure_kind"] is not None:
        ran = " (ran instead of the callback)" if row["called_on_failure"] else ""
        lines.append(f"  on failure: {printable(row['on_failure_kind'])}{ran}")
    if row["stopped"] == "aborted":
        lines.append(f"  aborted:  {printable(row['reason'] or '')}")
    elif row["stopped"]:
        lines.append("  cancelled by an operator")
    if row["paused"] and not row["finished_at"]:
        lines.append("  paused:   no member starts until `supervisor batches resume "
                     f"{row['id']}`")
    if row["max_failures"] is not None or row["max_failure_rate"] is not None:
        budget = [f"max_failures={row['max_failures']}"] if row["max_failures"] else []
        if row["max_failure_rate"] is not None:
            budget.append(f"max_failure_rate={row['max_failure_rate']:g}")
        lines.append(f"  budget:   {', '.join(budget)} ({row['failures']} failed "
                     "attempts so far)")
    if row["pending"]:
        lines.append(f"  eta:      {_eta(ahead)}")
    if spent is not None:
        lines.append(f"  cost:     {spent.describe()}")
    click.echo("\n".join(lines))


def _callback(row: dict) -> str:
    enqueued = row["on_failure_kind"] if row["called_on_failure"] else row["callback_kind"]
    if enqueued is None:
        return "-"
    kind = printable(enqueued)
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


def _batch_id(text: str) -> int:
    try:
        ident = int(text)
    except ValueError:
        raise CliError(f"batch id must be a number, not {text!r}", CLI_USAGE) from None
    if not 0 < ident < 2**63:
        raise CliError(f"batch id must be a positive number, not {text!r}", CLI_USAGE)
    return ident


def _act(action: str, batch_id: str, dsn: str | None, *args: int) -> ActionResult:
    # An action in chunks (shared.batches_actions); a refusal is one line, exit 1.
    ident = _batch_id(batch_id)
    with open_database(dsn) as conn:
        try:
            return getattr(batches_actions, action)(conn, ident, *args)
        except LookupError:
            raise CliError(f"no batch {ident} (see `supervisor batches list`)",
                           CLI_USAGE) from None
        except BatchActionRefused as exc:
            raise CliError(str(exc)) from None


def _done(result: ActionResult, what: str) -> None:
    click.echo(f"batch {result.batch_id}: {result.changed} member"
               f"{'' if result.changed == 1 else 's'} {what} in {result.seconds:.1f}s")


@batches_group.command("cancel")
@click.argument("batch_id", metavar="ID")
@dsn_option
@reports_errors
def cancel_command(batch_id: str, dsn: str | None) -> None:
    """Cancel every unfinished member: none starts from the first commit, running ones
    are told to stop, the callback runs once with the summary."""
    _done(_act("cancel", batch_id, dsn), "cancelled (running ones told)")


@batches_group.command("retry")
@click.argument("batch_id", metavar="ID")
@dsn_option
@reports_errors
def retry_command(batch_id: str, dsn: str | None) -> None:
    """Run the batch's failed (discarded) members again, exactly those; a finished
    batch opens again and its callback runs again when they are final."""
    _done(_act("retry_failed", batch_id, dsn), "retried")


@batches_group.command("pause")
@click.argument("batch_id", metavar="ID")
@dsn_option
@reports_errors
def pause_command(batch_id: str, dsn: str | None) -> None:
    """No member starts until `batches resume ID`; running members finish."""
    _done(_act("pause", batch_id, dsn), "held")


@batches_group.command("resume")
@click.argument("batch_id", metavar="ID")
@dsn_option
@reports_errors
def resume_command(batch_id: str, dsn: str | None) -> None:
    """Undo `batches pause`: the held members are available at once."""
    _done(_act("resume", batch_id, dsn), "released")


@batches_group.command("priority")
@click.argument("batch_id", metavar="ID")
@click.argument("priority", type=click.IntRange(-(2**31), 2**31 - 1))
@dsn_option
@reports_errors
def priority_command(batch_id: str, priority: int, dsn: str | None) -> None:
    """Give the members not started yet PRIORITY (lower runs first)."""
    _done(_act("reprioritize", batch_id, dsn, priority), f"now at priority {priority}")
