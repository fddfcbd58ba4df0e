"""``supervisor queues limit QUEUE``: limits that hold across every supervisor, stored
in the database (``supervisor.queue_limits``); each running supervisor picks a change up
within about half a second, without a restart. Settings in a supervisor's config file
(``max_workers``, ``max_rate``...) hold per supervisor process; these hold for all."""

from __future__ import annotations

import click

from shared.exitcodes import CLI_USAGE
from supervisor import admin
from supervisor.admin import parse_rate, parse_whole
from supervisor.cli.common import CliError, dsn_option, open_database, reports_errors
from supervisor.cli.format import describe_limits, json_text
from supervisor.cli.jobs import admin_errors


@click.command("limit")
@click.argument("queue")
@click.option("--max-running", metavar="N",
              help="Running jobs of QUEUE across all supervisors, at most (none: lift).")
@click.option("--max-rate", metavar="R",
              help="Jobs of QUEUE started per second across all supervisors (none: lift).")
@click.option("--burst", metavar="B",
              help="Starts allowed at once above the rate (needs a rate; default 1).")
@click.option("--per-key-max-running", metavar="K",
              help="Running jobs per concurrency key, at most (none: lift).")
@click.option("--clear", is_flag=True, help="Lift every global limit of QUEUE.")
@click.option("--json", "as_json", is_flag=True, help="Print the limits now in force as JSON.")
@dsn_option
@reports_errors
def limit_command(queue: str, max_running: str | None, max_rate: str | None,
                  burst: str | None, per_key_max_running: str | None, clear: bool,
                  as_json: bool, dsn: str | None) -> None:
    """Set QUEUE's global limits (only the ones given change); with no option, show
    them. Every running supervisor applies a change within a second."""
    given = {"max_running": max_running, "max_rate": max_rate, "burst": burst,
             "per_key_max_running": per_key_max_running}
    given = {name: text for name, text in given.items() if text is not None}
    if clear and given:
        raise CliError("--clear lifts every limit; give it alone", CLI_USAGE)
    with admin_errors():
        changes: dict[str, int | float | None] = {}
        if max_running is not None:
            changes["max_running"] = parse_whole("--max-running", max_running, 0)
        if max_rate is not None:
            changes["max_rate"] = parse_rate("--max-rate", max_rate)
        if burst is not None:
            # Alone it is accepted when the queue has a rate already (set_limits checks).
            changes["burst"] = parse_whole("--burst", burst, 1)
        if per_key_max_running is not None:
            changes["per_key_max_running"] = parse_whole("--per-key-max-running",
                                                         per_key_max_running, 1)
    held = None
    with admin_errors(), open_database(dsn) as conn:
        if not changes and not clear:
            now = admin.all_limits(conn).get(queue)
            held = admin.live_slices(conn).get(queue)
        else:
            now = admin.set_limits(conn, queue, changes, clear)
    if as_json:
        click.echo(json_text({"queue": queue, "limits": now, "held": held}))
        return
    shown = describe_limits(now)
    if not changes and not clear:
        holders = ""
        if held:
            holders = (f"; {held['supervisors']} supervisor(s) hold {held['slots']} running "
                       f"slots and {held['rate']:g}/s now")
        click.echo(f"queue {queue!r}: {'no global limits' if now is None else shown}{holders}")
    elif now is None:
        click.echo(f"queue {queue!r}: no global limits now; running supervisors lift them "
                   "within a second")
    else:
        click.echo(f"queue {queue!r}: {shown}; running supervisors apply this within a "
                   "second")
