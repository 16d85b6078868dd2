"""The site's own scripts and styles: local files (the site works offline), loaded in order.

readable-diagrams.js wraps mermaid.render, so it has to come after mermaid.min.js; both are
served from docs/, never fetched from a CDN. The browser check shows what they do on a page.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


class _Loader(yaml.SafeLoader):
    """mkdocs.yml names Python objects (!!python/name:...); they do not matter here."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def config() -> dict:
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)


def test_every_extra_script_and_stylesheet_is_a_file_of_the_site():
    listed = [*config().get("extra_javascript", []), *config().get("extra_css", [])]
    assert listed, "mkdocs.yml lists no extra scripts or styles"
    for entry in listed:
        path = entry if isinstance(entry, str) else entry.get("path", "")
        assert not re.match(r"[a-z]+:|//", path), f"{path} is fetched from the network"
        assert (ROOT / "docs" / path).is_file(), f"mkdocs.yml lists {path}, not in docs/"


def test_the_diagram_hook_loads_after_mermaid_and_the_stylesheet_is_listed():
    scripts = config()["extra_javascript"]
    assert scripts.index("assets/javascripts/readable-diagrams.js") > \
        scripts.index("assets/javascripts/mermaid.min.js"), \
        "readable-diagrams.js must load after mermaid.min.js (it wraps mermaid.render)"
    assert "stylesheets/extra.css" in config()["extra_css"]
    assert "assets/javascripts/scroll-signs.js" in scripts, \
        "scroll-signs.js marks wide boxes that scroll and gives the copy button its column"


def test_the_site_scripts_and_styles_fetch_nothing():
    own = [path for path in sorted((ROOT / "docs" / "assets" / "javascripts").glob("*.js"))
           if path.name != "mermaid.min.js"]
    assert {"readable-diagrams.js", "scroll-signs.js"} <= {path.name for path in own}
    for path in [*own, *sorted((ROOT / "docs" / "stylesheets").glob("*.css"))]:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"https?://|@import|url\(", text), f"{path.name} fetches something"
