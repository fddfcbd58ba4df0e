"""The demo pipeline's handler: one tile of a Mandelbrot image, in pure Python.

CPU-bound on purpose (tens to hundreds of milliseconds per tile), so ``supervisor demo``
shows the children sharing the cores. The tile comes back as base64 of its grey bytes;
the demo command assembles the tiles into a PNG.
"""

from __future__ import annotations

import base64

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
