"""Import only the parts of the `openai` SDK a run uses.

`import openai` executes `openai/types/__init__.py`, which imports every type of every API
the SDK covers (responses, assistants, evals, graders, realtime ...), and the first
`client.chat` executes `openai/resources/__init__.py`, which imports every resource. That
is about 1,700 modules and most of a second on every cold `pytest lessons/NN_topic`, for a
kit that sends chat completions only: more than the lesson's tests themselves take.

Those `__init__.py` files are generated and hold nothing but re-exports
(`from .batch import Batch as Batch`). `install()` puts a finder in front of the import
system that reads such a file, and instead of running it gives the package a
module-level `__getattr__` (PEP 562) that imports a name's submodule the first time the
name is asked for. `openai.types.Batch` and `from openai.types import Batch` still work and
give the same object, and so does a submodule asked for as an attribute (`openai.types.beta`,
which the `__init__.py` would have imported); importing a submodule never needed the
parent's re-exports. A package whose `__init__.py` does anything else, or binds a name that is also
one of its submodules (the two could then shadow each other), is imported as it is.

It changes when the SDK's modules run, never what they contain: the same idea as
PEP 810's lazy imports, for a library that cannot opt in itself. `tests/test_lazy_sdk.py`
checks that every name stays reachable, and fails when a new SDK release stops fitting the
pattern, so that the speed is not lost silently. SESSIONLAB_EAGER_OPENAI=1 turns it off.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from . import syntax

# The generated trees. The rest of the SDK (the client, the HTTP layer, the models' base
# class) is imported as it is.
LAZY_TREES = ("openai.types", "openai.resources")

# bound name -> (submodule relative to the package, attribute in it; None for the module)
Reexports = dict[str, tuple[str, str | None]]


def reexports(source: str) -> tuple[Reexports, list[str] | None] | None:
    """What an `__init__.py` re-exports, and its `__all__`; None if it does anything else."""
    names: Reexports = {}
    declared_all: list[str] | None = None
    for node in syntax.parse(source).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue                                        # the docstring
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            for alias in node.names:
                if alias.name == "*":
                    return None
                bound = alias.asname or alias.name
                if node.module is None:                    # from . import submodule
                    names[bound] = (alias.name, None)
                else:
                    names[bound] = (node.module, alias.name)
            continue
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "__all__"):
            try:
                declared_all = list(ast.literal_eval(node.value))
            except ValueError:
                return None
            continue
        return None
    submodules = {module.split(".")[0] for module, _ in names.values()}
    if submodules & {name for name, (_, attr) in names.items() if attr is not None}:
        return None
    return names, declared_all


class LazyPackageLoader(importlib.abc.Loader):
    """Gives a re-export-only package a `__getattr__` instead of running its `__init__`."""

    def __init__(self, names: Reexports, declared_all: list[str] | None) -> None:
        self.names = names
        self.declared_all = declared_all

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None                                         # the default module object

    def exec_module(self, module: ModuleType) -> None:
        names, package = self.names, module.__name__

        def __getattr__(name: str) -> object:
            if name in names:
                submodule, attribute = names[name]
                target = importlib.import_module(f"{package}.{submodule}")
                value = target if attribute is None else getattr(target, attribute)
            elif name.startswith("__"):
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            else:
                # A submodule by its name (openai.types.beta): run as it is, the
                # __init__.py would have imported it, and so made it an attribute
                try:
                    value = importlib.import_module(f"{package}.{name}")
                except ModuleNotFoundError as error:
                    if error.name != f"{package}.{name}":
                        raise                               # it exists, and failed
                    raise AttributeError(
                        f"module {package!r} has no attribute {name!r}") from None
            setattr(module, name, value)                    # asked once, then a plain global
            return value

        def __dir__() -> list[str]:
            return sorted(set(module.__dict__) | set(names))

        module.__getattr__ = __getattr__                    # type: ignore[attr-defined]
        module.__dir__ = __dir__                            # type: ignore[attr-defined]
        # `from package import *` asks for every name, so it behaves as before.
        module.__all__ = (self.declared_all if self.declared_all is not None
                          else list(names))                # type: ignore[attr-defined]


class LazyTreesFinder(importlib.abc.MetaPathFinder):
    """Finds packages in LAZY_TREES as usual, then swaps in LazyPackageLoader if it fits."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not any(fullname == tree or fullname.startswith(tree + ".")
                   for tree in LAZY_TREES):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if (spec is None or spec.submodule_search_locations is None
                or not isinstance(spec.loader, importlib.machinery.SourceFileLoader)):
            return spec                                     # a plain module: as it is
        with open(spec.loader.path, encoding="utf-8") as file:
            found = reexports(file.read())
        if found is not None:
            spec.loader = LazyPackageLoader(*found)
        return spec


def install() -> bool:
    """Put the finder in front of the import system, once; False if it is turned off."""
    if os.environ.get("SESSIONLAB_EAGER_OPENAI", "").lower() in ("1", "true", "yes", "on"):
        return False
    if not any(isinstance(finder, LazyTreesFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, LazyTreesFinder())
    return True
