"""Charts drawn on the server as inline SVG: no script, no library, nothing fetched,
so the strict Content-Security-Policy stands and a page works offline. Only numbers
and fixed words go into the markup; the one text from outside (a title) is escaped.

A chart is a few series over the same buckets of time: counts (jobs finished per
bucket, summed in the legend) or levels (seconds, or a depth: the legend gives the
largest). A bucket without a value (None) is drawn as a gap, not as a zero.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from html import escape
from typing import Any

from markupsafe import Markup

WIDTH, HEIGHT = 600, 140
PAD_LEFT, PAD_BOTTOM, PAD_TOP = 44, 18, 22  # the legend sits above the plot
COLORS = {"completed": "#2457c5", "failed": "#b3261e", "retried": "#a05a00",
          "run_mean": "#2457c5", "run_p95": "#7aa2ff", "wait_mean": "#1f7a3a",
          "wait_p95": "#8fcf9f", "available": "#a05a00", "running": "#2457c5",
          "oldest_wait": "#b3261e", "cpu_seconds": "#6a3fb5"}
LABELS = {"run_mean": "run mean", "run_p95": "run p95", "wait_mean": "wait mean",
          "wait_p95": "wait p95", "oldest_wait": "oldest wait", "cpu_seconds": "CPU"}
LEGEND_STEP = 110


def count(value: float) -> str:
    """A count for an axis or legend."""
    return f"{value:.0f}"


def seconds(value: float) -> str:
    """Seconds for an axis or legend, in the unit that reads best."""
    if value >= 3600:
        return f"{value / 3600:.1f}h"
    if value >= 60:
        return f"{value / 60:.1f}m"
    if value >= 1 or value == 0:
        return f"{value:.1f}s"
    return f"{value * 1000:.0f}ms"


def line_chart(title: str, points: list[dict[str, Any]],
               series: tuple[str, ...] = ("completed", "failed"), *,
               fmt: Callable[[float], str] = count, summary: str = "total") -> Markup:
    """An SVG line chart of ``series`` (keys of each point) over ``points`` (oldest
    first, each with ``at``), with its largest value on the axis and a legend giving
    each series' ``total`` or ``max`` (``summary``, then said: "run mean max 2.0s")
    formatted by ``fmt``."""
    values = [float(p[name]) for p in points for name in series if p.get(name) is not None]
    top = max([0.0, *values])
    if fmt is count:
        top = max(top, 1.0)
    top = top or 1.0
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
             f'font-size="10" fill="#6b7380">{escape(fmt(top))}</text>',
             f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + plot_h}" text-anchor="end" '
             f'font-size="10" fill="#6b7380">0</text>']
    if points:
        for label, at, anchor in ((points[0]["at"], PAD_LEFT, "start"),
                                  (points[-1]["at"], WIDTH - 4, "end")):
            parts.append(f'<text x="{at}" y="{HEIGHT - 4}" text-anchor="{anchor}" '
                         f'font-size="10" fill="#6b7380">{_clock(label)}</text>')
    for n, name in enumerate(series):
        for run in _runs(points, name):
            coords = " ".join(f"{PAD_LEFT + i * step:.1f},{y(v):.1f}" for i, v in run)
            parts.append(f'<polyline class="series-{name}" fill="none" '
                         f'stroke="{COLORS[name]}" stroke-width="1.5" points="{coords}"/>')
        present = [float(p[name]) for p in points if p.get(name) is not None]
        figure = sum(present) if summary == "total" else max(present, default=None)
        shown = "-" if figure is None else fmt(figure)
        parts.append(f'<text class="legend-{name}" x="{PAD_LEFT + 6 + n * LEGEND_STEP}" '
                     f'y="13" font-size="11" fill="{COLORS[name]}">'
                     f'{LABELS.get(name, name)} {"max " if summary == "max" else ""}'
                     f'{escape(shown)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _runs(points: list[dict[str, Any]], name: str) -> list[list[tuple[int, float]]]:
    # Stretches of buckets that have a value; a lone point is drawn as a dot-long line.
    runs: list[list[tuple[int, float]]] = []
    current: list[tuple[int, float]] = []
    for i, p in enumerate(points):
        if p.get(name) is None:
            if current:
                runs.append(current)
            current = []
        else:
            current.append((i, float(p[name])))
    if current:
        runs.append(current)
    return [r if len(r) > 1 else [r[0], (r[0][0], r[0][1])] for r in runs]


def _clock(moment: datetime) -> str:
    if not isinstance(moment, datetime):
        return ""
    return f"{moment.astimezone(UTC):%H:%M} UTC"
