"""Inline SVG charts for the report (no JavaScript, no external files): stacked bars, line charts,
histograms and interval strips. Each function returns one <svg> element as text."""

from __future__ import annotations

import math
from html import escape

from mwinv.fmt import duration

COMPONENT_COLORS = {
    "cpu_user": "#4e79a7", "cpu_sys": "#a0cbe8", "disk_seq": "#f28e2b", "disk_random": "#ffbe7d",
    "network": "#59a14f", "lock_wait": "#e15759", "run_queue": "#b07aa1", "other_wait": "#9c755f",
    "client_wait": "#f1ce63", "remote_wait": "#8cd17d", "not_allocated": "#bab0ac",
    # a remote storage wait's blocks (mwinv/cluster/storage.py), the rest of the query's time
    "link": "#59a14f", "daemons": "#a0cbe8", "disk": "#f28e2b", "client": "#b07aa1", "rest": "#bab0ac",
    # the experiment's what-if: a query's predicted time against the fastest scheme that ran it
    "predicted": "#4e79a7", "fastest run": "#bab0ac",
}
SERIES_COLORS = ["#4e79a7", "#e15759", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2"]


def _fmt(x: float) -> str:
    return f"{x:.1f}"


def stacked_bar(parts: list[tuple[str, float]], total: float, scale_max: float, width: int = 360,
                height: int = 14, label: str = "") -> str:
    """One horizontal bar: segments (component, value) in order, length total/scale_max of width."""
    out = [f'<svg class="bar" width="{width + max(120, 7 * len(label))}" height="{height}" role="img" '
           f'aria-label="{escape(label)}">']
    x = 0.0
    for comp, v in parts:
        if v <= 0 or scale_max <= 0:
            continue
        w = width * v / scale_max
        pct = 100 * v / total if total else 0
        out.append(f'<rect class="seg" x="{_fmt(x)}" y="0" width="{_fmt(max(w, 0.5))}" height="{height}" '
                   f'fill="{COMPONENT_COLORS.get(comp, "#888")}"><title>{escape(comp)}: {duration(v)} '
                   f'({pct:.0f}%)</title></rect>')
        x += w
    out.append(f'<text x="{_fmt(x + 4)}" y="{height - 3}" font-size="11">{escape(label)}</text></svg>')
    return "".join(out)


def legend(components: list[str]) -> str:
    items = []
    x = 0
    for c in components:
        items.append(f'<rect x="{x}" y="2" width="10" height="10" fill="{COMPONENT_COLORS.get(c, "#888")}"/>'
                     f'<text x="{x + 14}" y="11" font-size="11">{escape(c)}</text>')
        x += 14 + 7 * len(c) + 12
    return f'<svg class="legend" width="{x}" height="14">{"".join(items)}</svg>'


def line_chart(series: dict[str, list[tuple[float, float]]], title: str, unit: str, width: int = 640,
               height: int = 160, x_format: str = "{:.1f} s", dashed: tuple[str, ...] = ()) -> str:
    """Lines with axes and a legend; x in seconds from the start of the capture unless x_format says
    otherwise; the series named in `dashed` drawn dashed (a reference such as the ideal)."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        return ""
    left, right, top, bottom = 50, 30, 20, 24
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    peak = max(p[1] for p in pts)
    y1 = peak * 1.05 if peak > 0 else 1.0  # all zero: a 0..1 axis, the lines on the floor
    x1 = x1 if x1 > x0 else x0 + 1
    pw, ph = width - left - right, height - top - bottom

    def sx(x): return left + pw * (x - x0) / (x1 - x0)

    def sy(y): return top + ph * (1 - y / y1)

    out = [f'<svg class="chart" width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
           f'<text x="{left}" y="13" font-size="12" font-weight="bold">{escape(title)} ({escape(unit)})</text>',
           f'<line class="axis" x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#333"/>',
           f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#333"/>']
    for frac in (0, 0.5, 1):
        yv = y1 * frac
        out.append(f'<text x="{left - 4}" y="{_fmt(sy(yv) + 4)}" font-size="10" text-anchor="end">{yv:.3g}</text>')
    for frac in (0, 0.5, 1):
        xv = x0 + (x1 - x0) * frac
        out.append(f'<text x="{_fmt(sx(xv))}" y="{height - 8}" font-size="10" text-anchor="middle">'
                   f'{escape(x_format.format(xv))}</text>')
    lx = left + 7 * (len(title) + len(unit) + 3) + 10  # legend right of the title
    for i, (name, s) in enumerate(series.items()):
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        if len(s) == 1:
            out.append(f'<circle class="point" cx="{_fmt(sx(s[0][0]))}" cy="{_fmt(sy(s[0][1]))}" r="3" fill="{color}"/>')
        elif s:
            coords = " ".join(f"{_fmt(sx(x))},{_fmt(sy(y))}" for x, y in s)
            dash = ' stroke-dasharray="4 3"' if name in dashed else ""
            out.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.5"{dash} '
                       f'points="{coords}"><title>{escape(name)}</title></polyline>')
        out.append(f'<rect x="{lx}" y="5" width="10" height="10" fill="{color}"/>'
                   f'<text x="{lx + 13}" y="14" font-size="11">{escape(name)}</text>')
        lx += 20 + 7 * len(name)
    out.append("</svg>")
    return "".join(out)


def interval_strip(rows: list[tuple[str, list[tuple[float, float]], str]], span: tuple[float, float],
                   title: str, width: int = 640) -> str:
    """Rows of intervals (label, [(start, end)], color) over span (seconds): on-CPU / off-CPU timelines."""
    left, row_h = 90, 16
    height = 22 + row_h * len(rows) + 16
    s0, s1 = span
    s1 = s1 if s1 > s0 else s0 + 1e-9
    pw = width - left - 10

    def sx(x): return left + pw * (x - s0) / (s1 - s0)

    out = [f'<svg class="strip" width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
           f'<text x="0" y="13" font-size="12" font-weight="bold">{escape(title)}</text>']
    for i, (label, intervals, color) in enumerate(rows):
        y = 22 + i * row_h
        out.append(f'<text x="0" y="{y + 11}" font-size="11">{escape(label)}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{pw}" height="{row_h - 4}" fill="#f3f3f3"/>')
        for a, b in intervals:
            out.append(f'<rect class="seg" x="{_fmt(sx(a))}" y="{y}" width="{_fmt(max(sx(b) - sx(a), 0.5))}" '
                       f'height="{row_h - 4}" fill="{color}"/>')
    out.append(f'<text x="{left}" y="{height - 3}" font-size="10">0 ms</text>'
               f'<text x="{left + pw}" y="{height - 3}" font-size="10" text-anchor="end">{(s1 - s0) * 1e3:.1f} ms</text>')
    out.append("</svg>")
    return "".join(out)


def histogram(bins: list[tuple[float, float, int]], title: str, width: int = 640, height: int = 140) -> str:
    """Counts in contiguous bins [(lower, upper, count)] of durations (ns) on a log axis, one bar per bin
    (empty bins between them left blank); the x axis labelled at the outer bounds."""
    if not bins:
        return ""
    left, right, top, bottom = 50, 30, 20, 24
    lo, hi = math.log10(max(bins[0][0], 1)), math.log10(max(bins[-1][1], 2))
    hi = hi if hi > lo else lo + 1
    peak = max(b[2] for b in bins) or 1
    pw, ph = width - left - right, height - top - bottom

    def sx(v): return left + pw * (math.log10(max(v, 1)) - lo) / (hi - lo)

    out = [f'<svg class="chart histogram" width="{width}" height="{height}" role="img" '
           f'aria-label="{escape(title)}">',
           f'<text x="{left}" y="13" font-size="12" font-weight="bold">{escape(title)}</text>',
           f'<line class="axis" x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#333"/>',
           f'<text x="{left - 4}" y="{top + 4}" font-size="10" text-anchor="end">{peak}</text>']
    for a, b, n in bins:
        h = ph * n / peak
        out.append(f'<rect class="bin" x="{_fmt(sx(a))}" y="{_fmt(top + ph - h)}" '
                   f'width="{_fmt(max(sx(b) - sx(a) - 1, 1))}" height="{_fmt(h)}" fill="{SERIES_COLORS[0]}">'
                   f'<title>{escape(duration(a))} to '
                   f'{escape(duration(b))}: {n}</title></rect>')
    for v, anchor in ((bins[0][0], "start"), (bins[-1][1], "end")):
        out.append(f'<text x="{_fmt(sx(v))}" y="{height - 8}" font-size="10" text-anchor="{anchor}">'
                   f'{escape(duration(v))}</text>')
    out.append("</svg>")
    return "".join(out)
