"""The benchmark plot reads at the size the site shows it: legend below the plot, no tiny text.

The site shows the SVG unscaled (on a phone it scrolls sideways rather than shrinking), so the
figure must fit the desktop column at full size and every text in it must be readable there.
"""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench.plot import render

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "assets" / "bench" / "store.json"
SVG = "{http://www.w3.org/2000/svg}"
COLUMN_PX = 680     # the site's content column on a desktop screen is about 688 px wide
MIN_FONT = 12       # px: the smallest text the browser check lets a figure show (with room)


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


def test_the_committed_plot_is_drawn_from_the_committed_results() -> None:
    committed = (ROOT / "docs" / "assets" / "bench" / "append-cost.svg").read_text(encoding="utf-8")
    assert committed == render(results(True)), \
        "docs/assets/bench/append-cost.svg is stale: python -m bench.plot " \
        "docs/assets/bench/store.json docs/assets/bench/append-cost.svg"
