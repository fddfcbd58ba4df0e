"""``supervisor run``: start the parent loop and its children."""

from __future__ import annotations

import gc
import os
import time

import click

from shared.exitcodes import CLI_USAGE
from supervisor.cli.common import (
    CliError,
    dsn_option,
    open_database,
    reports_errors,
    schema_missing_message,
)
from supervisor.observe import configure_logging


def run_supervisor(*, dsn_option: str | None, apps: list[str], queues: list[str],
                   config_path: str | None, overrides: dict, queue_settings: list[str],
                   progress: bool, discards_ok: bool = False) -> int:
    """Everything ``run`` (and ``demo``) do after parsing flags; returns the exit code
    or raises ``CliError`` (or a database error ``reports_errors`` knows) with a one-line
    message."""
    from shared.db import DatabaseUnavailable, SchemaMissing
    from shared.dsn import dsn_source, is_embedded, resolve_dsn
    from shared.validation import check_name
    from supervisor.apps import AppImportError, import_apps
    from supervisor.arbiter import Arbiter
    from supervisor.cli.limits import children_problem
    from supervisor.config import (
        ConfigError,
        apply_queue_flags,
        build_config,
        load_file_settings,
        settings_path,
    )
    from supervisor.namesake import problem as namesake_problem
    from supervisor.observe import BurstProgress, TracingUnavailable
    from supervisor.schedules import (
        ScheduleError,
        merge_specs,
        parse_config_schedules,
        specs_from_registry,
    )
    from workers.registry import REGISTRY, queues_of_handlers

    namesake = namesake_problem()  # supervisord installed over this package
    if namesake is not None:
        raise CliError(namesake)
    try:
        config = build_config(load_file_settings(config_path), overrides,
                              source=settings_path(config_path))
        config = apply_queue_flags(config, queue_settings)
    except ConfigError as exc:
        raise CliError(str(exc), CLI_USAGE) from None
    problem = children_problem(config.children)
    if problem is not None:
        raise CliError(problem, CLI_USAGE)
    try:
        import_apps(apps)
    except AppImportError as exc:
        raise CliError(str(exc)) from None
    gc.freeze()
    gc.enable()  # off since supervisor.cli.early, for the imports of the start path
    if not REGISTRY:
        raise CliError("no job handlers loaded: name the modules that define them with --app")
    for handle in REGISTRY.values():
        beat = handle.defaults.heartbeat_timeout
        if beat is not None and beat <= config.heartbeat_interval:
            raise CliError(f"job kind {handle.kind!r}: heartbeat_timeout {beat:g} s must be "
                           f"longer than heartbeat_interval ({config.heartbeat_interval:g} s)",
                           CLI_USAGE)
    try:
        schedules = merge_specs(specs_from_registry(REGISTRY.values()),
                                parse_config_schedules(config.schedules, REGISTRY))
    except ScheduleError as exc:
        raise CliError(str(exc), CLI_USAGE) from None
    served = split_queues(queues) or config.queues or queues_of_handlers()
    for name in served:
        check_name("queue", name)
    warn_unhandled_queues(served, queues_of_handlers())
    dsn = resolve_dsn(dsn_option)
    source = dsn_source(dsn_option)  # before the line below makes it SUPERVISOR_DSN
    os.environ["SUPERVISOR_DSN"] = dsn  # children (current_job().batch) reach the same database
    embedded = is_embedded(dsn)
    if embedded:
        with open_database(dsn, source=source):
            pass  # started, and migrated on first use
    meter = BurstProgress(now=time.monotonic()) if progress and config.burst else None
    try:
        # Any other database: reachable and migrated is checked as the supervisor
        # connects, on its own connection, not on one opened for the check alone.
        arbiter = Arbiter(config, dsn, served, sorted(REGISTRY), app_modules=apps,
                          progress=meter, schedules=schedules, check_schema=not embedded,
                          discards_ok=discards_ok)
    except TracingUnavailable as exc:
        raise CliError(str(exc), CLI_USAGE) from None
    try:
        code = arbiter.run()
    except DatabaseUnavailable as exc:
        raise CliError(str(exc)) from None
    except SchemaMissing as exc:
        raise CliError(schema_missing_message(str(exc), dsn, source)) from None
    except OSError as exc:  # the metrics port is taken, say
        raise CliError(exc.strerror or str(exc)) from None
    if arbiter.halt_reason:
        raise CliError(f"halted: {arbiter.halt_reason}")
    return code


def split_queues(given: list[str]) -> list[str]:
    """``-q`` values as queue names: ``-q a,b`` is ``a`` and ``b`` (as Celery's ``-Q``),
    ``-q a -q b`` too; blanks dropped, each name once, in the order given."""
    names: list[str] = []
    for value in given:
        for name in value.split(","):
            name = name.strip()
            if name and name not in names:
                names.append(name)
    return names


def warn_unhandled_queues(served: list[str], handler_queues: list[str]) -> list[str]:
    """Warn (stderr) about each served queue that no loaded handler names: its jobs run
    only if their kind has a handler here anyway (enqueued with an explicit queue), so
    it is most likely a typo. Returns those queues."""
    strays = [name for name in served if name not in handler_queues]
    for name in strays:
        click.echo(f"supervisor: warning: no loaded handler serves queue {name!r} (handlers "
                   f"name {', '.join(handler_queues) or 'none'}); its jobs run only if "
                   "their kind has a handler here", err=True)
    return strays


class _Prefetch(click.ParamType):
    """A whole number of at least 1, or ``auto``."""

    name = "prefetch"

    def convert(self, value, param, ctx):
        if value == "auto" or isinstance(value, int):
            return value
        if isinstance(value, str) and value.isdigit() and int(value) >= 1:
            return int(value)
        self.fail(f"{value!r} is neither a whole number of at least 1 nor auto", param, ctx)


PREFETCH = _Prefetch()


class _NativeThreads(click.ParamType):
    """``auto``, ``off`` or a whole number of at least 1."""

    name = "native_threads"

    def convert(self, value, param, ctx):
        from supervisor.config import ConfigError, parse_native_threads

        try:
            return parse_native_threads(value)
        except ConfigError:
            self.fail(f"{value!r} is not auto, off or a whole number of at least 1",
                      param, ctx)


NATIVE_THREADS = _NativeThreads()


class _Children(click.ParamType):
    """How many children: a whole number of at least 1."""

    name = "children"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and value >= 1:
            return value
        if isinstance(value, str) and value.strip().isdigit() and int(value) >= 1:
            return int(value)
        self.fail(f"{value!r}: -n wants how many child processes to fork, a whole number of "
                  "at least 1 (default: the number of CPUs)", param, ctx)


CHILDREN = _Children()


@click.command("run")
@click.option("-n", "--children", type=CHILDREN, metavar="N",
              help="Child processes (default: CPUs).")
@click.option("--app", "apps", multiple=True, metavar="MODULE",
              help="Module defining @job handlers; repeat for several.")
@click.option("-q", "--queue", "queues", multiple=True, metavar="QUEUE",
              help="Serve only these queues: -q a,b or -q a -q b (default: every queue "
                   "a handler names).")
@click.option("--burst", is_flag=True,
              help="Exit once the queues are empty and nothing runs: 0 when every job it "
                   "ran completed, 3 when any was discarded or its dependents cancelled.")
@click.option("--discards-ok", "discards_ok", is_flag=True,
              help="With --burst, exit 0 even when jobs were discarded (for pipelines "
                   "where discards are normal).")
@click.option("--burst-horizon", type=click.FloatRange(min=0), metavar="SECONDS",
              help="With --burst, also wait for retries and scheduled jobs due this soon (60).")
@click.option("--grace", type=click.FloatRange(min=0), help="Seconds to drain on SIGTERM (25).")
@click.option("--lease-ttl", type=click.FloatRange(min=1),
              help="Seconds a claim survives without renewal (30).")
@click.option("--config", "config_path", type=str, metavar="FILE",
              help="Settings file (default: [tool.supervisor] in ./pyproject.toml).")
@click.option("--poll-interval", type=click.FloatRange(min=0.01), help="Seconds between polls (1).")
@click.option("--prefetch", type=PREFETCH, metavar="N|auto",
              help="Jobs held per child for queues without their own setting (auto: "
                   "measured from run times, so short jobs never wait for a claim).")
@click.option("--timeout", "default_timeout", type=click.FloatRange(min=0),
              help="Hard timeout in seconds for jobs whose handler sets none (3600; 0: none).")
@click.option("--max-jobs-per-child", type=click.IntRange(min=1))
@click.option("--max-memory-per-child", metavar="SIZE", help="RSS limit, e.g. 512MB or 1GiB.")
@click.option("--memory-budget", metavar="SIZE",
              help="Memory the jobs running here may reserve together, e.g. 4GiB (default: "
                   "the cgroup's memory.max less this process's RSS and a margin; none "
                   "outside a container). See docs/admission.md.")
@click.option("--resources", "resources", metavar="NAME=N[,...]",
              help="Counted resources this supervisor has, e.g. gpu=2: jobs that declare "
                   "resources={'gpu': 1} are admitted against them, and a GPU job's child "
                   "gets CUDA_VISIBLE_DEVICES for the devices it holds. See "
                   "docs/admission.md.")
@click.option("--heartbeat-timeout", type=click.FloatRange(min=0.1),
              help="Seconds a busy child may go without a heartbeat and without using "
                   "CPU before it counts as hung (30); one stopped (T) or in "
                   "uninterruptible sleep (D) is hung at once. Native code that holds "
                   "the GIL but uses CPU is busy, bounded only by the job's timeout.")
@click.option("--native-threads", type=NATIVE_THREADS, metavar="auto|N|off",
              help="Threads of the BLAS, OpenMP, MKL and numexpr pools in each child "
                   "(auto: its share of the CPUs, max(1, CPUs // children), so children "
                   "do not oversubscribe the cores; off: the libraries' defaults). "
                   "Variables you set (OMP_NUM_THREADS, ...) are left alone.")
@click.option("--output-capture", metavar="SIZE",
              help="Bytes of what each attempt prints (stdout and stderr, the last ones) "
                   "kept with the attempt and shown by 'jobs show' and the dashboard "
                   "(64KiB; 0: none). The log keeps every line either way.")
@click.option("--no-listen", "no_listen", is_flag=True,
              help="Poll only, no LISTEN/NOTIFY (for a pooler in transaction mode).")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535),
              help="Serve Prometheus metrics (GET /metrics) and /healthz on this port.")
@click.option("--metrics-host", metavar="ADDRESS",
              help="Address the metrics port binds (127.0.0.1; 0.0.0.0 exposes it).")
@click.option("--otel/--no-otel", "otel", default=None,
              help="OpenTelemetry spans for claims, writes and handlers (default: when "
                   "the --app modules import opentelemetry).")
@click.option("--queue-setting", "queue_settings", multiple=True, metavar="Q.KEY=VALUE",
              help="Per-queue setting, e.g. images.max_rate=20; repeatable.")
@dsn_option
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--log-format", default="text", show_default=True,
              type=click.Choice(["text", "json"]))
@reports_errors
def run_command(children, apps, queues, burst, discards_ok, burst_horizon, grace, lease_ttl,
                config_path,
                poll_interval, prefetch, default_timeout, max_jobs_per_child,
                max_memory_per_child, memory_budget, resources, heartbeat_timeout,
                native_threads,
                output_capture, no_listen,
                metrics_port, metrics_host, otel, queue_settings, dsn, log_level, log_format):
    """Run the supervisor: one parent claiming jobs, N forked children running them."""
    configure_logging(log_level, log_format)
    overrides = {
        "children": children, "grace": grace, "lease_ttl": lease_ttl, "burst": burst or None,
        "poll_interval": poll_interval, "prefetch": prefetch, "default_timeout": default_timeout,
        "max_jobs_per_child": max_jobs_per_child, "max_memory_per_child": max_memory_per_child,
        "heartbeat_timeout": heartbeat_timeout, "metrics_port": metrics_port,
        "metrics_host": metrics_host, "burst_horizon": burst_horizon,
        "listen": False if no_listen else None, "otel": otel,
        "native_threads": native_threads, "output_capture": output_capture,
        "memory_budget": memory_budget, "resources": resources,
    }
    code = run_supervisor(dsn_option=dsn, apps=list(apps), queues=list(queues),
                          config_path=config_path, overrides=overrides,
                          queue_settings=list(queue_settings), progress=True,
                          discards_ok=discards_ok)
    raise SystemExit(code)
