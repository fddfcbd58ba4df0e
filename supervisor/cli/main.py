"""The ``supervisor`` command: the click group and the schema and enqueue commands.

Other commands live in ``supervisor/cli_*.py`` modules and are attached at the bottom
with ``main.add_command``; shared helpers (``--dsn``, error reporting, opening the
database) are in ``supervisor.cli.common``.
"""

from __future__ import annotations

import click
import orjson

from shared.exitcodes import CLI_USAGE
from supervisor.cli.common import CliError, dsn_option, open_database, reports_errors


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pg-supervisor", prog_name="supervisor")
def main() -> None:
    """A PostgreSQL job queue with a pre-forking worker supervisor."""


@main.command("migrate")
@dsn_option
@reports_errors
def migrate_command(dsn: str | None) -> None:
    """Create or upgrade the database schema (idempotent)."""
    from shared.migrate import current_version, latest_version, migrate, newer_schema_message

    with open_database(dsn, check_schema=False) as conn:
        version, expected = current_version(conn), latest_version()
        if version is not None and version > expected:
            raise CliError(newer_schema_message(version, expected))
        applied = migrate(conn)
        if applied:
            for migration in applied:
                click.echo(f"applied {migration.version:04d}_{migration.name}")
        else:
            click.echo(f"schema is up to date (version {current_version(conn)})")


@main.command("enqueue")
@click.argument("kind")
@click.option("--args", "args_text", default="{}", metavar="JSON",
              help="Keyword arguments as a JSON object.")
@click.option("--queue", default="default", show_default=True)
@click.option("--priority", type=int, default=0, show_default=True, help="Lower runs first.")
@click.option("--delay", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Run no earlier than this many seconds from now.")
@click.option("--max-attempts", type=click.IntRange(min=1), default=None,
              help="Attempts before the job is discarded (default: its handler's, else 20).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS", help="Hard time limit of one attempt.")
@click.option("--unique-key", default=None,
              help="Return the live job with this key instead of adding another.")
@click.option("--concurrency-key", default=None, metavar="KEY",
              help="Jobs sharing KEY run at most the queue's per-key limit at once.")
@dsn_option
@reports_errors
def enqueue_command(kind, args_text, queue, priority, delay, max_attempts, timeout, unique_key,
                    concurrency_key, dsn) -> None:
    """Add a job of KIND and print its id. The embedded development database is
    migrated on first use; any other database needs `supervisor migrate` first.
    TRACEPARENT (and TRACESTATE) in the environment become the job's trace context."""
    from shared import tracing
    from shared.enqueue import enqueue

    args = _parse_args(args_text)
    try:
        carrier = tracing.carrier_from_environment()
    except ValueError as exc:
        raise CliError(str(exc), CLI_USAGE) from None
    tracing.use_process_context(carrier)
    try:
        with open_database(dsn) as conn:
            job_id = enqueue(kind, args, queue=queue, priority=priority, delay=delay,
                             max_attempts=max_attempts, timeout=timeout,
                             unique_key=unique_key, conn=conn,
                             concurrency_key=concurrency_key)
    finally:
        tracing.use_process_context(None)  # the command may run inside a longer process
    click.echo(job_id)


def _parse_args(text: str) -> dict:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise CliError(f"--args is not a JSON object: {exc}", CLI_USAGE) from None
    if not isinstance(value, dict):
        raise CliError(f"--args is not a JSON object: got {type(value).__name__} {text!r}",
                       CLI_USAGE)
    return value


def _attach_commands() -> None:
    # Commands that live in their own modules; each module names one click command.
    from supervisor.cli.batches import batches_group
    from supervisor.cli.dashboard import dashboard_command
    from supervisor.cli.demo import demo_command
    from supervisor.cli.jobs import jobs_group
    from supervisor.cli.queues import queues_group
    from supervisor.cli.run import run_command
    from supervisor.cli.schedules import schedules_group
    from supervisor.cli.status import status_command

    main.add_command(run_command)
    main.add_command(demo_command)
    main.add_command(status_command)
    main.add_command(jobs_group)
    main.add_command(queues_group)
    main.add_command(dashboard_command)
    main.add_command(schedules_group)
    main.add_command(batches_group)


_attach_commands()
