"""``supervisor queues list|pause|resume``. Pausing takes effect at each supervisor's
next claim (the claim skips paused queues), resuming wakes them through the schema's
NOTIFY trigger: no restart either way. ``pause --stop-running`` also stops the jobs of
the queue that run now (a stop notice, then the kill after ``kill_grace``); they go back
unspent and resume from their checkpoints after ``resume``."""

from __future__ import annotations

import click

from supervisor import admin
from supervisor.cli.common import dsn_option, open_database, reports_errors
from supervisor.cli.format import age, describe_limits, json_text, table
from supervisor.cli.jobs import admin_errors
from supervisor.cli.queue_limits import limit_command


@click.group("queues")
def queues_group() -> None:
    """List queues; pause and resume them; set limits that hold across supervisors."""


queues_group.add_command(limit_command)


@queues_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@dsn_option
@reports_errors
def list_command(as_json: bool, dsn: str | None) -> None:
    """Every queue that has jobs, has been paused or resumed, or has global limits:
    paused or not, jobs available and running, age of the oldest available job, its
    global limits (`supervisor queues limit`)."""
    with open_database(dsn) as conn:
        queues = admin.queue_stats(conn)
    rows = [{"name": q["name"], "paused": q["paused"], "stop_running": q["stop_running"],
             "available": q["counts"]["available"],
             "running": q["counts"]["running"], "oldest_available": q["oldest_available"],
             "limits": q["limits"]}
            for q in queues]
    if as_json:
        click.echo(json_text(rows))
    elif not rows:
        click.echo("no queues: no jobs yet")
    else:
        click.echo(table(["QUEUE", "PAUSED", "AVAIL", "RUN", "OLDEST", "LIMITS"],
                         [[r["name"], _paused(r), r["available"],
                           r["running"], age(r["oldest_available"]),
                           describe_limits(r["limits"])] for r in rows],
                         right=(2, 3, 4)))


@queues_group.command("pause")
@click.argument("queue")
@click.option("--stop-running", is_flag=True,
              help="Also stop its running jobs: each is told (workers.Stopping, "
                   "current_job().stopping), killed after kill_grace if still running, "
                   "and goes back without spending an attempt.")
@dsn_option
@reports_errors
def pause_command(queue: str, stop_running: bool, dsn: str | None) -> None:
    """Stop claiming from QUEUE. Running jobs finish (unless --stop-running); waiting
    jobs stay available."""
    with admin_errors(), open_database(dsn) as conn:
        done = admin.set_paused(conn, queue, True, stop_running=stop_running)
    _warn_unknown(done)
    was = "already paused" if done["was_paused"] else "supervisors stop claiming from it"
    stopped = (f"; {done['running']} running jobs told to stop and go back"
               if stop_running else "")
    click.echo(f"paused queue {queue!r} ({was}; {done['available']} available jobs wait"
               f"{stopped})")


def _paused(row: dict) -> str:
    if not row["paused"]:
        return "-"
    return "paused, stopping running" if row["stop_running"] else "paused"


def _warn_unknown(done: dict) -> None:
    if not done["known"]:
        click.echo(f"supervisor: warning: queue {done['name']!r} has no jobs and no live "
                   "supervisor serves it (a typo?); its switch is set anyway", err=True)


@queues_group.command("resume")
@click.argument("queue")
@dsn_option
@reports_errors
def resume_command(queue: str, dsn: str | None) -> None:
    """Claim from QUEUE again; supervisors serving it are woken at once."""
    with admin_errors(), open_database(dsn) as conn:
        done = admin.set_paused(conn, queue, False)
    _warn_unknown(done)
    was = "was paused" if done["was_paused"] else "was not paused"
    click.echo(f"resumed queue {queue!r} ({was}; {done['available']} available jobs)")
