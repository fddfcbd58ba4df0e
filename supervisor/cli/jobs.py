"""``supervisor jobs list|show|retry|cancel``: look at jobs and act on them one at a time
or, for retry, in bulk by state. The SQL is in the admin room (``supervisor.admin``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import click

from shared.exitcodes import CLI_ERROR, CLI_USAGE
from shared.jobs import FINISHED_STATES, RUNNING, STATES
from shared.validation import printable
from supervisor import admin
from supervisor.admin import AdminError
from supervisor.cli.common import CliError, dsn_option, open_database, reports_errors
from supervisor.cli.format import (
    json_text,
    one_line,
    since,
    stamp,
    table,
    to_json,
    usage_text,
)


@contextmanager
def admin_errors() -> Iterator[None]:
    """Turn ``AdminError`` into ``CliError``: exit 2 for malformed input, 1 otherwise."""
    try:
        yield
    except AdminError as exc:
        raise CliError(str(exc), CLI_USAGE if exc.usage else CLI_ERROR) from None


@click.group("jobs")
def jobs_group() -> None:
    """List, inspect, retry and cancel jobs."""


@jobs_group.command("list")
@click.option("--queue", default=None, help="Only this queue.")
@click.option("--kind", default=None, help="Only this kind.")
@click.option("--state", default=None, metavar="STATE",
              help=f"Only this state: {', '.join(STATES)}.")
@click.option("--limit", default="50", show_default=True, metavar="N", help="At most N jobs.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@dsn_option
@reports_errors
def list_command(queue, kind, state, limit, as_json, dsn) -> None:
    """Jobs, newest first: id, kind, queue, state, attempts, priority, when it runs (or
    finished), and the last error's first line."""
    with admin_errors():
        admin.check_state(state)
        count = _limit(limit)
        with open_database(dsn) as conn:
            # One row more than shown tells whether more match.
            rows = admin.list_jobs(conn, queue=queue, kind=kind, state=state,
                                   limit=count + 1)
    more = len(rows) > count
    rows = rows[:count]
    if as_json:
        click.echo(json_text(rows))
        if more:  # on stderr, so the JSON on stdout stays one parseable array
            click.echo(_more_note(count), err=True)
        return
    if not rows:
        click.echo("no jobs match")
        return
    now = datetime.now(UTC)
    click.echo(table(
        ["ID", "KIND", "QUEUE", "STATE", "ATTEMPT", "PRIO", "WHEN", "LAST ERROR"],
        [[r["id"], r["kind"], r["queue"], r["state"],
          f"{r['attempt']}/{r['max_attempts'] or '-'}",
          r["priority"], _when(r, now), one_line(r["last_error"])] for r in rows],
        right=(0, 4, 5)))
    if more:
        click.echo(_more_note(count))


def _more_note(count: int) -> str:
    return (f"(the newest {count} shown; more jobs match: raise --limit, e.g. --limit "
            f"{count * 10}, or narrow with --queue/--kind/--state)")


def _limit(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise AdminError(f"--limit is a positive integer; got {text!r}", usage=True)
    return int(text)


def _when(row: dict[str, Any], now: datetime) -> str:
    if row["state"] in FINISHED_STATES:
        return f"finished {since(row['finished_at'], now)}"
    if row["state"] == RUNNING:
        return f"started {since(row['attempted_at'], now)}"
    if row.get("dependencies") and row["state"] == "scheduled":
        return f"after {row['dependencies']} dependencies"
    when = since(row["run_at"], now)
    if when == "never":
        return f"never (run_at {stamp(row['run_at'])})"
    return f"runs {when}" if when.startswith("in ") else f"due {when}"


@jobs_group.command("show")
@click.argument("job_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the whole row as JSON.")
@dsn_option
@reports_errors
def show_command(job_id, as_json, dsn) -> None:
    """Everything about one job: its columns, args, result, progress, and each failed
    attempt's error with its traceback."""
    with admin_errors():
        ident = admin.parse_job_id(job_id)
        with open_database(dsn) as conn:
            row = admin.get_job(conn, ident)
            row["missing_dependencies"] = (admin.missing_dependencies(conn, ident)
                                           if row.get("depends_on") else [])
    if as_json:
        click.echo(to_json(row))
        return
    click.echo(render_job(row))


def render_job(row: dict[str, Any]) -> str:
    """One job as labelled lines, then args/result/progress as JSON, then its errors."""
    now = datetime.now(UTC)
    lines = [f"job {row['id']}: {printable(row['kind'])} in queue {printable(row['queue'])}"
             f" is {row['state']}"]
    for name in ("priority", "unique_key", "timeout", "lease_owner"):
        if row[name] is not None:
            lines.append(f"  {name + ':':<17} {printable(str(row[name]))}")
    if row.get("batch_id") is not None:
        lines.append(f"  {'batch:':<17} {row['batch_id']} (supervisor batches show "
                     f"{row['batch_id']})")
    if row.get("depends_on"):
        lines.append(f"  {'depends on:':<17} {', '.join(map(str, row['depends_on']))}")
    missing = row.get("missing_dependencies")
    if missing:
        which = ", ".join(map(str, missing))
        lines.append(f"  {'waits for ever:':<17} deleted dependenc"
                     f"{'ies' if len(missing) > 1 else 'y'} {which}; cancel this job "
                     f"(supervisor jobs cancel {row['id']})")
    native = row.get("native")
    if native:
        lines.append(f"  {'busy:':<17} in native code (worker {native.get('worker')}, pid "
                     f"{native.get('pid')}): no heartbeat for {native.get('seconds')} s, "
                     "CPU time moving")
    limit = row["max_attempts"] or "its handler's limit (set at its first claim)"
    lines.append(f"  {'attempt:':<17} {row['attempt']} of {limit}")
    for name in ("created_at", "run_at", "attempted_at", "heartbeat_at", "lease_expires_at",
                 "finished_at"):
        if row[name] is not None:
            lines.append(f"  {name + ':':<17} {stamp(row[name])}"
                         f" ({since(row[name], now)})")
    if row.get("checkpoint_at") is not None:
        lines.append(f"  {'checkpoint:':<17} {row['checkpoint_bytes']} bytes, written "
                     f"{stamp(row['checkpoint_at'])} ({since(row['checkpoint_at'], now)})")
    for name in ("args", "progress", "result"):
        if row[name] is not None:
            body = json_text(row[name])
            if len(body) > 100:  # long values read better indented, one key per line
                body = "\n    " + to_json(row[name]).replace("\n", "\n    ")
            lines.append(f"  {name + ':':<17} {body}")
    if row.get("usage") is not None:
        lines.append(f"  {'usage:':<17} {usage_text(row['usage'])} (last attempt)")
    if row.get("output"):
        lines.append("  output:           (last attempt, its last "
                     f"{len(row['output'].encode())} bytes)")
        lines.append(_indented(row["output"]))
    errors = row["errors"] or []
    lines.append(f"  errors:           {len(errors) or 'none'}")
    for err in errors:
        head = (f"  - attempt {err.get('attempt')} {err.get('kind')} at {err.get('at')}"
                f" (supervisor {err.get('supervisor') or '-'}): {err.get('message')}")
        lines.append(printable(head))
        if err.get("usage") is not None:
            lines.append(f"    usage: {usage_text(err['usage'])}")
        if err.get("traceback"):
            lines.append(_indented(str(err["traceback"])))
        if err.get("output"):
            lines.append("    output:")
            lines.append(_indented(str(err["output"]), 6))
    return "\n".join(lines)


def _indented(text: str, by: int = 4) -> str:
    """Text from a job (a traceback, what it printed), escaped, each line indented."""
    pad = " " * by
    return pad + printable(text.rstrip(), keep_newlines=True).replace("\n", "\n" + pad)


@jobs_group.command("retry")
@click.argument("job_id", metavar="[ID]", required=False)
@click.option("--state", default=None, metavar="STATE",
              help="Bulk: every job in this state (discarded, cancelled or retryable).")
@click.option("--queue", default=None, help="Bulk: only this queue.")
@click.option("--kind", default=None, help="Bulk: only this kind.")
@dsn_option
@reports_errors
def retry_command(job_id, state, queue, kind, dsn) -> None:
    """Run discarded, cancelled or retryable jobs again, now, with a full set of
    attempts (attempt reset to 0; the errors history is kept). Give one ID, or
    --state (with optional --queue/--kind) for many. Completed and running jobs are
    not retried: enqueue a new job to run completed work again. A job whose unique key
    another live job holds is refused (one ID) or skipped (bulk)."""
    with admin_errors():
        if job_id is not None:
            if state or queue or kind:
                raise AdminError("give a job ID or --state/--queue/--kind, not both",
                                 usage=True)
            ident = admin.parse_job_id(job_id)
            with open_database(dsn) as conn:
                was = admin.retry_job(conn, ident)
                stranded = admin.cancelled_dependents(conn, ident)
            click.echo(f"retried job {ident} (was {was}); it is available now")
            if stranded:
                shown = ", ".join(map(str, stranded[:10])) + (", ..." if len(stranded) > 10
                                                              else "")
                click.echo(f"note: {len(stranded)} job{'s' if len(stranded) != 1 else ''} "
                           f"cancelled because job {ident} did not complete stay cancelled "
                           f"({shown}); enqueue them again once it completes")
            return
        if state is None:
            raise AdminError("give a job ID, or --state discarded|cancelled|retryable "
                             "(with --queue/--kind) to retry many", usage=True)
        admin.check_state(state, admin.RETRY_STATES)
        with open_database(dsn) as conn:
            done = admin.retry_jobs(conn, state=state, queue=queue, kind=kind)
    note = (f"; skipped {done.skipped} whose unique key another live job holds"
            if done.skipped else "")
    click.echo(f"retried {done.retried} {state} job{'s' if done.retried != 1 else ''}{note}")


@jobs_group.command("cancel")
@click.argument("job_id", metavar="ID")
@dsn_option
@reports_errors
def cancel_command(job_id, dsn) -> None:
    """Cancel a job that has not finished. A running job's supervisor is told at once
    (NOTIFY) and kills that child; a supervisor that missed the message stops the work
    at its next lease renewal."""
    with admin_errors():
        ident = admin.parse_job_id(job_id)
        with open_database(dsn) as conn:
            was = admin.cancel_job(conn, ident)
    told = "; its supervisor was told" if was == RUNNING else ""
    click.echo(f"cancelled job {ident} (was {was}{told})")
