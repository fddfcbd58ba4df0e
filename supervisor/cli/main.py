"""The ``supervisor`` command: the click group and the schema and enqueue commands.

Other commands live in modules of their own under ``supervisor/cli/`` and are imported
when named (``_LazyGroup``); shared helpers (``--dsn``, error reporting, opening the
database) are in ``supervisor.cli.common``.
"""

from __future__ import annotations

import click
import orjson

from shared.exitcodes import CLI_USAGE
from supervisor.cli.common import CliError, dsn_option, open_database, reports_errors


class _LazyGroup(click.Group):
    """The command group; the commands that live in modules of their own are imported
    when they are named (or listed by ``--help``), so ``supervisor run`` and
    ``supervisor enqueue`` do not import the dashboard, the demo and the admin commands
    (13 ms of every start-up)."""

    lazy = {
        "run": ("supervisor.cli.run", "run_command"),
        "demo": ("supervisor.cli.demo", "demo_command"),
        "status": ("supervisor.cli.status", "status_command"),
        "jobs": ("supervisor.cli.jobs", "jobs_group"),
        "queues": ("supervisor.cli.queues", "queues_group"),
        "dashboard": ("supervisor.cli.dashboard", "dashboard_command"),
        "schedules": ("supervisor.cli.schedules", "schedules_group"),
        "batches": ("supervisor.cli.batches", "batches_group"),
        "kinds": ("supervisor.cli.kinds", "kinds_group"),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            import importlib

            module, attribute = self.lazy[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
@click.option("--expires-in", type=float, default=None, metavar="SECONDS",
              help="Not started within this many seconds, the job ends as expired.")
@click.option("--expires-at", default=None, metavar="ISO-8601",
              help="Not started by this moment (with its UTC offset), it ends as expired.")
@click.option("--cpus", type=int, default=None, metavar="N",
              help="CPUs (children's worth of a supervisor's budget) the job reserves.")
@click.option("--memory", default=None, metavar="SIZE",
              help="Memory the job reserves, e.g. 600MiB or 6GiB.")
@click.option("--resources", "resources_text", default=None, metavar="NAME=N[,...]",
              help="Counted resources the job holds while it runs, e.g. gpu=1.")
@click.option("--depends-on", "depends_on", multiple=True, metavar="[NAME=]ID",
              help="Hold the job until job ID completed (repeat for several; NAME lets "
                   "the handler find it with current_job().dependency(NAME)).")
@click.option("--allow-failure", is_flag=True,
              help="With --depends-on: run even if a dependency ends discarded, cancelled "
                   "or expired.")
@dsn_option
@reports_errors
def enqueue_command(kind, args_text, queue, priority, delay, max_attempts, timeout, unique_key,
                    concurrency_key, expires_in, expires_at, cpus, memory, resources_text,
                    depends_on, allow_failure, dsn) -> None:
    """Add a job of KIND and print its id. The embedded development database is
    migrated on first use; any other database needs `supervisor migrate` first.
    TRACEPARENT (and TRACESTATE) in the environment become the job's trace context."""
    from shared import tracing
    from shared.enqueue import enqueue
    from shared.reservations import parse_resources

    args = _parse_args(args_text)
    expiry = _parse_expiry(expires_in, expires_at)
    if allow_failure and not depends_on:
        raise CliError("--allow-failure needs --depends-on", CLI_USAGE)
    edges = _parse_edges(depends_on, allow_failure) if depends_on else None
    try:
        resources = parse_resources(resources_text)
    except ValueError as exc:
        raise CliError(str(exc), CLI_USAGE) from None
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
                             concurrency_key=concurrency_key, cpus=cpus, memory=memory,
                             resources=resources, depends_on=edges, **expiry)
    finally:
        tracing.use_process_context(None)  # the command may run inside a longer process
    click.echo(job_id)


def _parse_edges(texts: tuple[str, ...], allow_failure: bool) -> list:
    """--depends-on [NAME=]ID values as enqueue's ``depends_on`` (``Dep``s), refused in
    one line before the database is touched."""
    from shared.dependencies import Dep

    edges = []
    for text in texts:
        name, _, ident = text.rpartition("=")
        if not ident.strip().isdigit() or not 0 < int(ident) < 2**63:
            raise CliError(f"--depends-on takes a job id (or NAME=ID), not {text!r}",
                           CLI_USAGE)
        edges.append(Dep(int(ident), allow_failure, name or None))
    return edges


def _parse_expiry(expires_in: float | None, expires_at: str | None) -> dict:
    """--expires-in / --expires-at as enqueue's options, refused in one line before the
    database is touched."""
    from datetime import datetime

    from shared.producers.plans import check_expiry

    moment = None
    if expires_at is not None:
        try:
            moment = datetime.fromisoformat(expires_at)
        except ValueError:
            raise CliError(f"--expires-at is not an ISO-8601 moment: {expires_at!r}",
                           CLI_USAGE) from None
        if moment.tzinfo is None:
            raise CliError(f"--expires-at needs a UTC offset (say {expires_at}+00:00)",
                           CLI_USAGE)
    try:
        check_expiry(expires_in, moment)
    except ValueError as exc:
        message = str(exc).replace("expires_in", "--expires-in").replace("expires_at",
                                                                          "--expires-at")
        raise CliError(message, CLI_USAGE) from None
    expiry: dict = {}
    if expires_in is not None:
        expiry["expires_in"] = expires_in
    if moment is not None:
        expiry["expires_at"] = moment
    return expiry


def _parse_args(text: str) -> dict:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise CliError(f"--args is not a JSON object: {exc}", CLI_USAGE) from None
    if not isinstance(value, dict):
        raise CliError(f"--args is not a JSON object: got {type(value).__name__} {text!r}",
                       CLI_USAGE)
    return value
