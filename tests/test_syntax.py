"""The kit parses Python from threads (the maintainers' checks, the mutation pass), and
CPython 3.11's parser shares a counter between threads: see sessionlab.syntax."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

from sessionlab import syntax

PACKAGE = Path(syntax.__file__).parent


def test_the_kit_parses_only_through_the_lock() -> None:
    direct = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == Path(syntax.__file__) or "reference" in path.relative_to(
                PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and ast.unparse(node.func) == "ast.parse"):
                direct.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not direct, (
        "these call ast.parse without sessionlab.syntax's lock; from two threads at "
        f"once they can fail with a SystemError: {', '.join(direct)}")


def test_parses_from_threads_at_once_give_the_trees_one_thread_gives() -> None:
    source = Path(syntax.__file__).read_text(encoding="utf-8")
    alone = ast.dump(syntax.parse(source))
    seen: list[str] = []

    def parse_many() -> None:
        seen.extend(ast.dump(syntax.parse(source)) for _ in range(20))

    threads = [threading.Thread(target=parse_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [alone] * 80
    assert syntax.parse("1 + 2", mode="eval").body.op.__class__ is ast.Add
