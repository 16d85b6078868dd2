"""The benchmark plot reads at the size the site shows it: legend below the plot, no tiny text.

The site scales the SVG to its column: on a 390 px phone the figure is shrunk to the column, so
it is drawn narrow enough that its smallest text stays readable there, and every text (the
title, the legend) lies inside it. Each series has a colour of its own.
"""

from __future__ import annotations

import copy
import itertools
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench import stores
from bench.plot import COLOURS, INK, render, series_colours

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "assets" / "bench" / "store.json"
SVG = "{http://www.w3.org/2000/svg}"
COLUMN_PX = 680     # the site's content column on a desktop screen is about 688 px wide
PHONE_COLUMN_PX = 358   # the column on a 390 px phone: the figure is scaled to it
MIN_FONT = 12       # px: the smallest text in the figure as drawn
MIN_SHOWN_PX = 11   # the smallest text the browser check lets a figure show once scaled
# A glyph's width as a share of the font size: generous for the site's sans-serif fonts, so
# that a text said to fit does fit (bold a little wider).
GLYPH, BOLD_GLYPH = 0.58, 0.64


def results(extrapolated: bool) -> dict:
    data = json.loads(RESULTS.read_text(encoding="utf-8"))
    if not extrapolated:
        data = copy.deepcopy(data)
        for curve in data["curves"].values():
            curve["extrapolated"] = False
    return data


def font_sizes(svg: ET.Element) -> list[tuple[str, float]]:
    """(text, font size in px) for every text, the size inherited as SVG inherits it."""
    found = []

    def walk(element: ET.Element, size: float) -> None:
        size = float(element.get("font-size", size))
        if element.tag == SVG + "text" and (element.text or "").strip():
            found.append((element.text.strip(), size))
        for child in element:
            walk(child, size)

    walk(svg, 16.0)
    return found


@pytest.mark.parametrize("extrapolated", [True, False])
def test_the_plot_fits_the_column_with_no_text_under_the_minimum(extrapolated: bool) -> None:
    svg = ET.fromstring(render(results(extrapolated)))
    width = float(svg.get("viewBox").split()[2])
    assert width <= COLUMN_PX, f"the plot is {width:.0f} px wide; the column holds {COLUMN_PX}"
    small = [(text, size) for text, size in font_sizes(svg) if size < MIN_FONT]
    assert not small, f"text under {MIN_FONT} px in the plot: {small}"


@pytest.mark.parametrize("extrapolated", [True, False])
def test_the_legend_sits_below_the_plot_inside_the_figure(extrapolated: bool) -> None:
    data = results(extrapolated)
    svg = ET.fromstring(render(data))
    frame = next(e for e in svg.iter(SVG + "rect"))
    bottom = float(frame.get("y")) + float(frame.get("height"))
    width, height = (float(v) for v in svg.get("viewBox").split()[2:])
    labels = {text: el for el in svg.iter(SVG + "text") if (text := (el.text or "").strip())}
    entries = [label for label in labels if label.startswith("SessionLog") or label == "floor"]
    assert len(entries) == 2, f"the legend should name SessionLog and the floor: {sorted(labels)}"
    for name in entries:
        x, y = float(labels[name].get("x")), float(labels[name].get("y"))
        assert y > bottom, \
            f"legend entry {name!r} at y={y:.0f} is not below the plot (it ends at {bottom:.0f})"
        assert 0 <= x < width / 2 + 34 and y <= height, \
            f"legend entry {name!r} at ({x}, {y}) is off the figure"
    assert ("extrapolated past the time cap" in labels) == extrapolated


@pytest.mark.parametrize("extrapolated", [True, False])
def test_scaled_to_a_phones_column_the_plots_smallest_text_stays_readable(extrapolated):
    svg = ET.fromstring(render(results(extrapolated)))
    width = float(svg.get("viewBox").split()[2])
    scale = min(1.0, PHONE_COLUMN_PX / width)
    smallest = min(size for _, size in font_sizes(svg)) * scale
    assert smallest >= MIN_SHOWN_PX, (
        f"on a phone the {width:.0f} px plot is shrunk to {PHONE_COLUMN_PX} px and its "
        f"smallest text to {smallest:.1f} px (at least {MIN_SHOWN_PX}): draw it narrower")


def text_extent(element: ET.Element, size: float, bold: bool) -> tuple[float, float]:
    """Where a text runs from and to along x, estimated from its length and anchor."""
    x = float(element.get("x", 0))
    length = len(element.text.strip()) * size * (BOLD_GLYPH if bold else GLYPH)
    anchor = element.get("text-anchor", "start")
    start = {"start": x, "middle": x - length / 2, "end": x - length}[anchor]
    return start, start + length


@pytest.mark.parametrize("extrapolated", [True, False])
def test_every_text_of_the_plot_lies_inside_it(extrapolated):
    """The title, the axis names, the legend and the footnote are whole: none runs past
    either edge of the figure (on a phone it is shown exactly that wide)."""
    svg = ET.fromstring(render(results(extrapolated)))
    width = float(svg.get("viewBox").split()[2])
    outside = []
    for element in svg.iter(SVG + "text"):
        if not (element.text or "").strip() or element.get("transform"):
            continue            # the rotated axis name runs up the left edge
        size = float(element.get("font-size", svg.get("font-size")))
        start, end = text_extent(element, size, element.get("font-weight") == "600")
        if start < 0 or end > width:
            outside.append(f"{element.text.strip()!r} from {start:.0f} to {end:.0f} px")
    assert not outside, f"texts run past the {width:.0f} px figure: " + "; ".join(outside)


def rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


def distance(a: str, b: str) -> float:
    return sum((x - y) ** 2 for x, y in zip(rgb(a), rgb(b))) ** 0.5


def test_every_series_of_the_plot_has_a_colour_of_its_own():
    """Two series of one grey cannot be told apart: each store of the committed run is
    drawn in a colour far from every other series' and from the grey of the axes."""
    svg = ET.fromstring(render(results(True)))
    drawn = {}
    for line in svg.iter(SVG + "polyline"):
        label = line.find(SVG + "title").text
        drawn.setdefault(label, line.get("stroke"))
    assert len(drawn) == len(results(True)["curves"]), f"series drawn: {sorted(drawn)}"
    close = [f"{a} and {b} ({drawn[a]}, {drawn[b]})"
             for a, b in itertools.combinations(sorted(drawn), 2)
             if distance(drawn[a], drawn[b]) < 60]
    assert not close, "series too close in colour to tell apart: " + "; ".join(close)
    like_ink = [name for name, colour in drawn.items()
                if distance(colour, INK) < 40 and name != "floor"]
    assert not like_ink, f"series drawn in the axes' grey: {like_ink}"


def test_every_store_the_benchmark_knows_has_a_colour_and_others_get_a_spare():
    known = {cls.key for cls in stores.Store.__subclasses__() if cls.key}
    assert known <= COLOURS.keys(), f"stores without a colour: {sorted(known - COLOURS.keys())}"
    given = series_colours(["subject", "someone-new", "another"])
    assert len(set(given.values())) == 3, f"two series share a colour: {given}"
    assert not {given["someone-new"], given["another"]} & set(COLOURS.values())


def test_the_committed_plot_is_drawn_from_the_committed_results() -> None:
    committed = (ROOT / "docs" / "assets" / "bench" / "append-cost.svg").read_text(encoding="utf-8")
    assert committed == render(results(True)), \
        "docs/assets/bench/append-cost.svg is stale: python -m bench.plot " \
        "docs/assets/bench/store.json docs/assets/bench/append-cost.svg"
