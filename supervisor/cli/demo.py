"""``supervisor demo``: a real CPU-bound batch, end to end, on the default database.

It renders a Mandelbrot image in tiles: enqueues one job per tile as a batch whose
callback assembles the tiles into a PNG, and runs the supervisor in burst mode with live
progress until the callback has written the image.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import click

from supervisor.cli.common import dsn_option, open_database, reports_errors
from supervisor.cli.run import run_supervisor
from supervisor.observe import configure_logging


def tile_args(width: int, height: int, tile: int, max_iter: int) -> list[dict]:
    """One job's args per tile, row by row."""
    return [
        {"x0": x, "y0": y, "width": min(tile, width - x), "height": min(tile, height - y),
         "image_width": width, "image_height": height, "max_iter": max_iter}
        for y in range(0, height, tile) for x in range(0, width, tile)
    ]


@click.command("demo")
@click.option("-n", "--children", type=click.IntRange(min=1), default=None,
              help="Child processes (default: CPUs).")
@click.option("--output", default="demo-output/mandelbrot.png", show_default=True,
              type=click.Path(dir_okay=False), help="Where to write the image.")
@click.option("--size", default="960x640", show_default=True, metavar="WxH")
@click.option("--tile", default=64, show_default=True, type=click.IntRange(min=8))
@click.option("--max-iter", default=300, show_default=True, type=click.IntRange(min=10))
@dsn_option
@reports_errors
def demo_command(children, output, size, tile, max_iter, dsn):
    """Render a Mandelbrot image as a batch of CPU-bound jobs, in burst mode."""
    from shared.dsn import dsn_source, resolve_dsn
    from shared.waiting import JobFailed, wait
    from workers.demo import DEMO_QUEUE, assemble_image, mandelbrot_tile

    configure_logging("warning")
    # Progress lines still show when stderr is not a terminal (CI logs, pipes).
    logging.getLogger("supervisor.progress").setLevel(logging.INFO)
    try:
        width, height = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise click.UsageError(f"--size {size!r}: expected WIDTHxHEIGHT, e.g. 960x640") from None
    source = dsn_source(dsn)
    dsn = resolve_dsn(dsn)
    path = Path(output).resolve()
    with open_database(dsn, source=source) as conn:
        args = tile_args(width, height, tile, max_iter)
        then = assemble_image.bind(path=str(path), width=width, height=height)
        batch = mandelbrot_tile.options(conn=conn).enqueue_many(args, then=then)
    click.echo(f"enqueued {len(batch.ids)} tiles of a {width}x{height} Mandelbrot image "
               f"as batch {batch.id}", err=True)
    started = time.monotonic()
    code = run_supervisor(dsn_option=dsn, apps=["workers.demo"], queues=[DEMO_QUEUE],
                          config_path=None, overrides={"children": children, "burst": True},
                          queue_settings=[], progress=True)
    elapsed = time.monotonic() - started
    batch.dsn = dsn
    summary = batch.summary()
    try:  # the burst ran the callback too; this returns at once
        done = wait(summary.callback_id, timeout=5, dsn=dsn) if summary.callback_id else None
    except (JobFailed, TimeoutError) as exc:
        raise click.ClickException(f"the image was not assembled: {exc}") from None
    if not done:
        raise click.ClickException(f"batch {batch.id} did not finish "
                                   f"({summary.pending} tiles pending)")
    click.echo(f"wrote {output} ({width}x{height}, {done['tiles']}/{len(batch.ids)} tiles "
               f"in {elapsed:.1f} s)")
    raise SystemExit(code if done["tiles"] == len(batch.ids) else 1)
