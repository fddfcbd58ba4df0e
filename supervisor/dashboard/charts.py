"""Charts drawn on the server as inline SVG: no script, no library, nothing fetched,
so the strict Content-Security-Policy stands and a page works offline. Only numbers
and fixed words go into the markup; the one text from outside (a title) is escaped.
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from typing import Any

from markupsafe import Markup

WIDTH, HEIGHT = 600, 140
PAD_LEFT, PAD_BOTTOM, PAD_TOP = 40, 18, 8
COLORS = {"completed": "#2457c5", "failed": "#b3261e", "retried": "#a05a00"}


def line_chart(title: str, points: list[dict[str, Any]],
               series: tuple[str, ...] = ("completed", "failed")) -> Markup:
    """An SVG line chart of ``series`` (keys of each point) over ``points`` (oldest
    first, each with ``at``), with its largest value on the axis and a legend."""
    top = max([1] + [int(p[name] or 0) for p in points for name in series])
    plot_w, plot_h = WIDTH - PAD_LEFT - 4, HEIGHT - PAD_BOTTOM - PAD_TOP
    step = plot_w / max(len(points) - 1, 1)

    def y(value: float) -> float:
        return PAD_TOP + plot_h - plot_h * (value / top)

    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(title)}</title>",
             f'<line x1="{PAD_LEFT}" y1="{PAD_TOP + plot_h}" x2="{WIDTH - 4}" '
             f'y2="{PAD_TOP + plot_h}" stroke="#dde1e6"/>',
             f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + 8}" text-anchor="end" '
             f'font-size="10" fill="#6b7380">{top}</text>',
             f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + plot_h}" text-anchor="end" '
             f'font-size="10" fill="#6b7380">0</text>']
    if points:
        for label, at, anchor in ((points[0]["at"], PAD_LEFT, "start"),
                                  (points[-1]["at"], WIDTH - 4, "end")):
            parts.append(f'<text x="{at}" y="{HEIGHT - 4}" text-anchor="{anchor}" '
                         f'font-size="10" fill="#6b7380">{_clock(label)}</text>')
    for n, name in enumerate(series):
        coords = " ".join(f"{PAD_LEFT + i * step:.1f},{y(int(p[name] or 0)):.1f}"
                          for i, p in enumerate(points))
        parts.append(f'<polyline class="series-{name}" fill="none" stroke="{COLORS[name]}" '
                     f'stroke-width="1.5" points="{coords}"/>')
        total = sum(int(p[name] or 0) for p in points)
        parts.append(f'<text x="{PAD_LEFT + 6 + n * 130}" y="{PAD_TOP + 10}" font-size="11" '
                     f'fill="{COLORS[name]}">{name} {total}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _clock(moment: datetime) -> str:
    if not isinstance(moment, datetime):
        return ""
    return f"{moment.astimezone(UTC):%H:%M} UTC"
