"""The demo pipeline's handler: one tile of a Mandelbrot image, in pure Python.

CPU-bound on purpose (tens to hundreds of milliseconds per tile), so ``supervisor demo``
shows the children sharing the cores. The tile comes back as base64 of its grey bytes;
``assemble_image``, the batch's callback, streams the tiles' results and writes a PNG.
"""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

from workers import current_job, job

DEMO_QUEUE = "demo"


@job(queue=DEMO_QUEUE, max_attempts=3, timeout=120)
def mandelbrot_tile(x0: int, y0: int, width: int, height: int, image_width: int,
                    image_height: int, max_iter: int = 200) -> dict:
    """Escape-time Mandelbrot for the pixels ``[x0, x0+width) x [y0, y0+height)``."""
    scale = 3.0 / image_width
    pixels = bytearray(width * height)
    for row in range(height):
        ci = (y0 + row - image_height / 2) * scale
        for col in range(width):
            cr = (x0 + col) * scale - 2.2
            zr = zi = 0.0
            n = 0
            while n < max_iter and zr * zr + zi * zi <= 4.0:
                zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
                n += 1
            # Interior black; outside, brighter the longer a point resisted escaping.
            pixels[row * width + col] = 0 if n == max_iter else int(255 * (n / max_iter) ** 0.3)
        if row % 16 == 15:
            current_job().progress(row + 1, height)
    return {"x0": x0, "y0": y0, "width": width, "height": height,
            "pixels": base64.b64encode(bytes(pixels)).decode()}


@job(queue=DEMO_QUEUE, max_attempts=3, timeout=300)
def assemble_image(path: str, width: int, height: int) -> dict:
    """The batch's callback: every completed tile into one PNG at ``path``."""
    image = bytearray(width * height)
    tiles = 0
    for member in current_job().batch.results():
        if member.state != "completed":
            continue  # a lost tile stays black; the demo reports it
        tiles += 1
        result = member.result
        pixels = base64.b64decode(result["pixels"])
        w, x0, y0 = result["width"], result["x0"], result["y0"]
        for row in range(result["height"]):
            start = (y0 + row) * width + x0
            image[start:start + w] = pixels[row * w:(row + 1) * w]
    write_png(Path(path), width, height, bytes(image))
    return {"path": path, "tiles": tiles}


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
