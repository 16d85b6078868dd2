"""sessionlab.lazy_sdk: the openai SDK imported by need, with nothing missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from sessionlab.lazy_sdk import reexports


def run_python(code: str, *, eager: bool = False, **variables: str) -> dict:
    env = {**os.environ, "SESSIONLAB_EAGER_OPENAI": "1" if eager else "", **variables}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


# Every package of the lazy trees, imported; what each binds, by name: lazily (asked for
# through __getattr__) or eagerly (the SDK's own __init__.py run as it is). And which of
# the submodules named in $SUBMODULES (or, eagerly, found bound) are attributes.
NAMESPACES = """
    import importlib, inspect, json, os, pathlib, sys
    from sessionlab import lazy_sdk
    lazy_sdk.install()
    import openai
    root = pathlib.Path(openai.__file__).parent
    packages = [importlib.import_module(".".join(("openai", *init.parent.relative_to(
                    root).parts)))
                for tree in lazy_sdk.LAZY_TREES
                for init in sorted(root.joinpath(*tree.split(".")[1:]).rglob("__init__.py"))]
    # Submodules first, before any re-exported name is asked for (which imports its
    # submodule, and so makes it an attribute anyway)
    asked = json.loads(os.environ.get("SUBMODULES") or "{}")
    submodules = {}
    for package in packages:
        names = asked.get(package.__name__, list(vars(package)))
        submodules[package.__name__] = sorted(
            name for name in names if inspect.ismodule(getattr(package, name, None))
            and getattr(package, name).__name__ == f"{package.__name__}.{name}")
    found = {}
    for package in packages:
        if isinstance(package.__spec__.loader, lazy_sdk.LazyPackageLoader):
            bound = {name: getattr(package, name)
                     for name in package.__spec__.loader.names}
        else:
            bound = dict(vars(package))
        found[package.__name__] = sorted(
            f"{name}={getattr(value, '__module__', '')}.{getattr(value, '__name__', '')}"
            for name, value in bound.items()
            if not name.startswith("_") and not inspect.ismodule(value)
            and getattr(value, "__module__", "") != "__future__")
    lazy = [name for name, module in sys.modules.items()
            if isinstance(getattr(getattr(module, "__spec__", None), "loader", None),
                          lazy_sdk.LazyPackageLoader)]
    print(json.dumps({"found": found, "lazy": lazy, "submodules": submodules}))
"""


@pytest.mark.campaign
def test_every_name_the_sdk_reexports_is_there_when_imported_lazily() -> None:
    eager = run_python(NAMESPACES, eager=True)
    lazy = run_python(NAMESPACES, SUBMODULES=json.dumps(eager["submodules"]))
    assert eager["lazy"] == [], "SESSIONLAB_EAGER_OPENAI=1 should turn the finder off"
    assert lazy["lazy"], (
        "no package of openai.types or openai.resources fits the re-export-only pattern "
        "any more: a new SDK release changed its __init__.py files, and every cold lesson "
        "run is back to importing the whole SDK (see sessionlab/lazy_sdk.py)")
    assert lazy["found"].keys() == eager["found"].keys()
    for package, names in eager["found"].items():
        assert lazy["found"][package] == names, f"{package} binds other names lazily"
    # A submodule the __init__.py imported is an attribute of its package: lazily too
    assert lazy["submodules"] == eager["submodules"]
    assert sum(map(len, eager["submodules"].values())) > 100


def test_a_chat_completion_loads_only_the_chat_parts_of_the_sdk() -> None:
    loaded = run_python("""
        import json, sys
        from sessionlab import lazy_sdk
        lazy_sdk.install()
        from sessionlab.scripted import ScriptedModel, say
        model = ScriptedModel([say("hello")])
        reply = model.client().chat.completions.create(
            model=model.model, messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "hello"
        print(json.dumps(sorted(sys.modules)))
    """)
    assert "openai.resources.chat.completions.completions" in loaded
    # What the SDK's generated __init__.py files would have imported: other APIs' types
    # and resources (a package such as openai.types.beta is imported, its contents not).
    for unused in ("openai.types.batch", "openai.types.beta.assistant",
                   "openai.types.responses.response", "openai.types.graders.multi_grader",
                   "openai.resources.audio", "openai.resources.beta",
                   "openai.resources.responses"):
        assert unused not in loaded, f"{unused} was imported for a chat completion"


def test_an_init_that_does_more_than_reexport_is_run_as_it_is() -> None:
    assert reexports("from .a import A as A\nfrom .b import (B, C as D)\n") == (
        {"A": ("a", "A"), "B": ("b", "B"), "D": ("b", "C")}, None)
    assert reexports('"""Doc."""\nfrom __future__ import annotations\n'
                     "from . import sub\n__all__ = ['sub']\n") == (
        {"sub": ("sub", None)}, ["sub"])
    for source in ("from .a import A\nimport os\n",            # another statement
                   "from .a import *\n",                       # names unknown until run
                   "from ..a import A\n",                      # outside the package
                   "from .a import A\nX = 1\n",
                   "from .a import A\n__all__ = list_of_names()\n",
                   "from .a import a\nfrom .b import B\n"):    # `a` would shadow submodule a
        assert reexports(source) is None, source


@pytest.mark.parametrize("value", ["1", "true"])
def test_the_finder_can_be_turned_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from sessionlab import lazy_sdk
    monkeypatch.setenv("SESSIONLAB_EAGER_OPENAI", value)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    assert lazy_sdk.install() is False
