"""The plot of per-append cost against session size, as a hand-written SVG (stdlib only).

Colours are mid-tones and the background is transparent, so the same file reads on the site's
light and dark palettes. A peer that hit the time cap is drawn solid as far as it was measured
and dashed where its cost is extrapolated.

The figure is drawn for a phone's column (WIDTH, about 360 px) with the legend in one column
below the plot and no text under MIN_FONT px, so that scaled to fit a 390 px screen its
smallest text stays readable and its title and legend are whole; the site shows it larger
where there is room. Every series has a colour of its own (COLOURS names one for every store
bench.stores knows).
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any

COLOURS = {
    "subject": "#2f81f7",
    "floor": "#8f96a0",      # the floor is the one grey series: a baseline, not a contender
    "naive": "#d29922",
    "sqlite3": "#2da44e",
    "postgres": "#db61a2",
    "langchain": "#e5534b",
    "agents": "#a371f7",
}
# A store without a colour above still gets one no other series has.
SPARE_COLOURS = ("#1b9aaa", "#e16f24", "#6e7781")
INK = "#7d8590"          # axes and text: readable on white and on a dark slate background
GRID = "#7d8590"

WIDTH = 360
LEFT, RIGHT, TOP = 76, 20, 40           # around the plot area (room for 100k under the edge)
MARGIN = 12                             # left of the title, the legend and the footnote
PLOT_H = 240
LEGEND_COLUMNS, LEGEND_ROW = 1, 22      # the legend below the x axis
FONT, TITLE_FONT, MIN_FONT = 14, 15, 12
FOOT_CHARACTERS = 50                    # a footnote line at MIN_FONT within WIDTH


def _nice_step(span: float, ticks: int = 5) -> float:
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * power:
            return m * power
    return 10 * power


def _fmt_size(x: float) -> str:
    if x >= 1000 and x % 1000 == 0:
        return f"{int(x // 1000)}k"
    return f"{x:,.0f}"


def _fmt_us(y: float) -> str:
    if y >= 1_000_000:
        return f"{y / 1_000_000:g} s"
    if y >= 1000:
        return f"{y / 1000:g} ms"
    return f"{y:g} µs" if y >= 1 else f"{y:.2g} µs"


def write_svg(result: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(result), encoding="utf-8")


def render(result: dict[str, Any]) -> str:
    curves = result["curves"]
    stores = result["stores"]
    meta = result["meta"]
    n = meta["n"]
    order = [k for k in ("subject", "floor", "naive", "sqlite3", "agents", "langchain") if k in curves]
    order += [k for k in curves if k not in order]
    values = [y for k in order for y in curves[k]["us"] if y > 0]
    lo, hi = min(values), max(values)
    log_y = hi / lo > 20
    plot_w, plot_h = WIDTH - LEFT - RIGHT, PLOT_H
    extrapolated = any(curves[k]["extrapolated"] for k in order)
    legend_rows = math.ceil((len(order) + extrapolated) / LEGEND_COLUMNS)
    legend_top = TOP + plot_h + 70
    foot = (f'median of {meta["repeat"]} runs · {meta["message_bytes"]:.0f}-byte messages · '
            f'lesson {meta["lesson"]} · Python {meta["python"]} · {meta["date"]}')
    foot_lines = _wrap(foot.split(" · "), FOOT_CHARACTERS)
    colours = series_colours(order)
    foot_top = legend_top + legend_rows * LEGEND_ROW + 8
    height = foot_top + 16 * len(foot_lines)

    # Session size on a log scale: the first thousand appends get as much room as the last
    # ninety thousand, so a store that was capped early still shows what it measured.
    x_lo = 1.0
    x_hi = 10 ** math.ceil(math.log10(max(n, 10)))

    def px(x: float) -> float:
        return LEFT + plot_w * (math.log10(max(x, x_lo)) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo))

    if log_y:
        y0 = 10 ** math.floor(math.log10(lo))
        y1 = 10 ** math.ceil(math.log10(hi))

        def py(y: float) -> float:
            return TOP + plot_h * (1 - (math.log10(max(y, y0)) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)))
        yticks = []
        decade = y0
        while decade <= y1 * 1.0001:
            for m in (1, 2, 5):
                if decade * m <= y1 * 1.0001:
                    yticks.append(decade * m)
            decade *= 10
    else:
        step = _nice_step(hi)
        y0, y1 = 0.0, math.ceil(hi * 1.1 / step) * step

        def py(y: float) -> float:
            return TOP + plot_h * (1 - (y - y0) / (y1 - y0))
        yticks = [i * step for i in range(int(round(y1 / step)) + 1)]

    out: list[str] = []
    add = out.append
    add(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
        f'height="{height}" role="img" aria-labelledby="title desc" '
        'font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif" '
        f'font-size="{FONT}">')
    add('<title id="title">Per-append cost against session size</title>')
    add(f'<desc id="desc">Microseconds per append for each store, as the session grows from 0 to '
        f'{n:,} messages; median of {meta["repeat"]} runs, lesson {escape(meta["lesson"])}, '
        f'Python {meta["python"]}, {meta["date"]}.</desc>')
    add(f'<text x="{MARGIN}" y="22" fill="{INK}" font-size="{TITLE_FONT}" font-weight="600">'
        f'Per-append cost as the session grows</text>')
    # grid and y axis
    for y in yticks:
        yy = py(y)
        major = not log_y or abs(math.log10(y) - round(math.log10(y))) < 1e-9
        add(f'<line x1="{LEFT}" y1="{yy:.1f}" x2="{LEFT + plot_w}" y2="{yy:.1f}" stroke="{GRID}" '
            f'stroke-opacity="{0.35 if major else 0.15}" stroke-width="1"/>')
        if major or len(yticks) <= 7:       # more than two decades: label powers of ten only
            add(f'<text x="{LEFT - 8}" y="{yy + 4:.1f}" fill="{INK}" text-anchor="end">{_fmt_us(y)}</text>')
    # x axis: powers of ten, with 2 and 5 between them as fainter lines
    decade = x_lo
    while decade <= x_hi * 1.0001:
        for m in (1, 2, 5):
            x = decade * m
            if x > x_hi * 1.0001:
                break
            xx = px(x)
            add(f'<line x1="{xx:.1f}" y1="{TOP}" x2="{xx:.1f}" y2="{TOP + plot_h}" stroke="{GRID}" '
                f'stroke-opacity="{0.3 if m == 1 else 0.12}" stroke-width="1"/>')
            if m == 1:
                add(f'<text x="{xx:.1f}" y="{TOP + plot_h + 18}" fill="{INK}" text-anchor="middle">'
                    f'{_fmt_size(x)}</text>')
        decade *= 10
    if n < x_hi:
        xx = px(n)
        add(f'<line x1="{xx:.1f}" y1="{TOP}" x2="{xx:.1f}" y2="{TOP + plot_h}" stroke="{INK}" '
            'stroke-opacity="0.5" stroke-dasharray="2 3"/>')
    add(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="{INK}" '
        'stroke-opacity="0.6"/>')
    add(f'<text x="{WIDTH / 2:.1f}" y="{TOP + plot_h + 40}" fill="{INK}" text-anchor="middle">'
        'messages in the session (log scale)</text>')
    add(f'<text transform="translate(15 {TOP + plot_h / 2:.1f}) rotate(-90)" fill="{INK}" '
        f'text-anchor="middle">time per append{" (log scale)" if log_y else ""}</text>')
    # series
    for key in order:
        curve = curves[key]
        colour = colours[key]
        width = 3 if key == "subject" else 2
        points = list(zip(curve["size"], curve["us"]))
        cut = curve["measured_up_to"]
        solid = [(x, y) for x, y in points if x < cut] if curve["extrapolated"] else points
        dashed = [(x, y) for x, y in points if x >= cut] if curve["extrapolated"] else []
        if solid and dashed:
            dashed.insert(0, solid[-1])
        label = escape(stores[key]["label"])
        for part, dash in ((solid, ""), (dashed, ' stroke-dasharray="6 5"')):
            if len(part) == 1:
                add(f'<circle cx="{px(part[0][0]):.1f}" cy="{py(part[0][1]):.1f}" r="3" fill="{colour}"/>')
            elif part:
                pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in part)
                add(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="{width}" '
                    f'stroke-linejoin="round"{dash}><title>{label}</title></polyline>')
    # legend, below the plot in columns, then the footnote
    entries = [(escape(_short(stores[k]["label"])), colours[k],
                3 if k == "subject" else 2, "") for k in order]
    if extrapolated:
        entries.append(("extrapolated past the time cap", INK, 2, ' stroke-dasharray="6 5"'))
    column_w = (WIDTH - 2 * MARGIN) / LEGEND_COLUMNS
    for i, (text, colour, width, dash) in enumerate(entries):
        lx = MARGIN + column_w * (i // legend_rows)
        yy = legend_top + LEGEND_ROW * (i % legend_rows)
        add(f'<line x1="{lx:.1f}" y1="{yy - 4}" x2="{lx + 26:.1f}" y2="{yy - 4}" stroke="{colour}" '
            f'stroke-width="{width}"{dash}/>')
        add(f'<text x="{lx + 34:.1f}" y="{yy}" fill="{INK}">{text}</text>')
    for i, text in enumerate(foot_lines):
        add(f'<text x="{MARGIN}" y="{foot_top + 16 * i}" fill="{INK}" font-size="{MIN_FONT}">'
            f'{escape(text)}</text>')
    add("</svg>")
    return "\n".join(out) + "\n"


def series_colours(keys: list[str]) -> dict[str, str]:
    """Each series' colour: its own from COLOURS, or a spare one no other series uses."""
    spare = [colour for colour in SPARE_COLOURS if colour not in COLOURS.values()]
    found = {}
    for key in keys:
        if key in COLOURS:
            found[key] = COLOURS[key]
        elif spare:
            found[key] = spare.pop(0)
        else:
            raise ValueError(f"no colour left for the series {key!r}: add it to COLOURS")
    return found


def _wrap(parts: list[str], width: int) -> list[str]:
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return lines


def main(argv: list[str] | None = None) -> int:
    """Draw the plot again from a results file: python -m bench.plot results.json out.svg"""
    import json
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m bench.plot RESULTS.json OUT.svg", file=sys.stderr)
        return 2
    write_svg(json.loads(Path(args[0]).read_text(encoding="utf-8")), Path(args[1]))
    return 0


def _short(label: str) -> str:
    return (label.replace("SessionLog (", "SessionLog ").replace(")", "")
                 .replace("LangChain FileChatMessageHistory", "LangChain file history")
                 .replace("Agents SDK SQLiteSession", "Agents SDK SQLite"))


if __name__ == "__main__":
    raise SystemExit(main())
