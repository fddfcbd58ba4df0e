"""``supervisor demo``: a real CPU-bound batch, end to end, on the default database.

It renders a Mandelbrot image in tiles: enqueues one job per tile, runs the supervisor
in burst mode with live progress until every tile is done, then assembles the tiles
from the stored results into a PNG.
"""

from __future__ import annotations

import base64
import logging
import struct
import time
import zlib
from pathlib import Path

import click

from supervisor.cli.common import dsn_option, open_database, reports_errors
from supervisor.cli.run import run_supervisor
from supervisor.observe import configure_logging


def write_png(path: Path, width: int, height: int, grey: bytes) -> None:
    """An 8-bit greyscale PNG (the format is small enough to write by hand)."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        body = tag + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + grey[y * width:(y + 1) * width] for y in range(height))
    png = (b"\x89PNG\r\n\x1a\n"
           + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b""))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)


def tile_args(width: int, height: int, tile: int, max_iter: int) -> list[dict]:
    """One job's args per tile, row by row."""
    return [
        {"x0": x, "y0": y, "width": min(tile, width - x), "height": min(tile, height - y),
         "image_width": width, "image_height": height, "max_iter": max_iter}
        for y in range(0, height, tile) for x in range(0, width, tile)
    ]


def assemble(dsn: str, ids: list[int], width: int, height: int) -> tuple[bytes, int]:
    """The image's grey bytes from the tiles' results; returns (pixels, tiles missing)."""
    from shared.db import connect

    image = bytearray(width * height)
    with connect(dsn) as conn:
        rows = conn.execute(
            "SELECT result FROM supervisor.jobs WHERE id = ANY(%s) AND state = 'completed'",
            (ids,)).fetchall()
    for (result,) in rows:
        pixels = base64.b64decode(result["pixels"])
        w, x0, y0 = result["width"], result["x0"], result["y0"]
        for row in range(result["height"]):
            start = (y0 + row) * width + x0
            image[start:start + w] = pixels[row * w:(row + 1) * w]
    return bytes(image), len(ids) - len(rows)


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
    from workers.demo import DEMO_QUEUE, mandelbrot_tile

    configure_logging("warning")
    # Progress lines still show when stderr is not a terminal (CI logs, pipes).
    logging.getLogger("supervisor.progress").setLevel(logging.INFO)
    try:
        width, height = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise click.UsageError(f"--size {size!r}: expected WIDTHxHEIGHT, e.g. 960x640") from None
    source = dsn_source(dsn)
    dsn = resolve_dsn(dsn)
    with open_database(dsn, source=source) as conn:
        args = tile_args(width, height, tile, max_iter)
        ids = mandelbrot_tile.options(conn=conn).enqueue_many(args)
    click.echo(f"enqueued {len(ids)} tiles of a {width}x{height} Mandelbrot image", err=True)
    started = time.monotonic()
    code = run_supervisor(dsn_option=dsn, apps=["workers.demo"], queues=[DEMO_QUEUE],
                          config_path=None, overrides={"children": children, "burst": True},
                          queue_settings=[], progress=True)
    elapsed = time.monotonic() - started
    pixels, missing = assemble(dsn, ids, width, height)
    path = Path(output)
    write_png(path, width, height, pixels)
    click.echo(f"wrote {path} ({width}x{height}, {len(ids) - missing}/{len(ids)} tiles "
               f"in {elapsed:.1f} s)")
    raise SystemExit(code if not missing else 1)
