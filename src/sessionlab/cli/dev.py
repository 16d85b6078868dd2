"""Commands around the course itself: the demo, the scripted model as a server, and the
maintainers' tools (`dev check`, `dev mutate`, `dev starters`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.text import Text

from .. import course, snapshots, starters
from .ui import Ui


# `demo` and `dev check` are handed their arguments whole by `main` (they parse their own);
# they are registered here for the overview in `sessionlab --help`.


def cmd_demo(args: argparse.Namespace, ui: Ui, root: Path | None) -> int:
    from .. import demo
    return int(demo.main(list(args.rest)) or 0)


def cmd_dev_check(args: argparse.Namespace, ui: Ui, root: Path | None) -> int:
    from .. import maintainers
    return int(maintainers.main(list(args.rest)) or 0)


def cmd_dev_mutate(args: argparse.Namespace, ui: Ui, root: Path | None) -> int:
    from .. import mutate
    return int(mutate.main(list(args.rest)) or 0)


def cmd_dev_starters(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    if args.check:
        found = starters.drift(root)
        if not found:
            ui.out.print("Every starter matches what the generator makes from its solution.")
            return 0
        for item in found:
            ui.out.print(Text(f"{item.path} differs from the generated starter:",
                              style="bold red"))
            ui.out.print(item.diff, markup=False, highlight=False, soft_wrap=True)
        ui.error(f"{len(found)} starter(s) out of date", "regenerate them with `sessionlab dev starters`")
        return 1
    changed = starters.write_starters(root)
    for path in changed:
        ui.out.print(f"wrote {path.relative_to(root)}")
    if not changed:
        ui.out.print("Every starter was already up to date.")
    return 0


def cmd_dev_generate(args: argparse.Namespace, ui: Ui, root: Path) -> int:
    """course/ -> solutions/NN_topic/*.py -> lessons/NN_topic/*.py (the starters)."""
    lessons = course.lessons(root)
    changed = snapshots.write_snapshots(root, lessons) + starters.write_starters(root)
    for path in changed:
        ui.out.print(f"wrote {path.relative_to(root)}")
    if not changed:
        ui.out.print("Every snapshot and starter was already what course/ makes.")
    return 0


def cmd_serve(args: argparse.Namespace, ui: Ui, root: Path | None) -> int:
    from ..server import serve_forever
    return serve_forever(ui, host=args.host, port=args.port)


def register(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add("demo", cmd_demo, "chat",
                     "the quest end to end on the reference and the built-in model (day 1, day 2, a fork)",
                     needs_root=False, parents=[common])
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options for the demo (see `sessionlab demo --help`)")

    p = commands.add("serve", cmd_serve, "chat",
                     "serve the built-in town model over HTTP on this machine, for any OpenAI client",
                     needs_root=False, parents=[common],
                     description="Serve the built-in scripted town model as an OpenAI-compatible endpoint on "
                                 "loopback, so that any client (curl, the openai package, `sessionlab chat "
                                 "--base-url`) can talk to it. Ctrl-C stops it.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8800, help="port (default 8800; 0 picks a free one)")

    p = commands.add("dev", lambda args, ui, root: (args.dev_parser.print_help(), 2)[1], "teacher",
                     "maintainers' tools: `dev check` (the whole course), `dev mutate "
                     "[NN]`, "
                     "`dev generate`, `dev starters [--check]`",
                     needs_root=False, parents=[common],
                     listed_as="dev check|mutate|generate|starters")
    dev_sub = p.add_subparsers(dest="dev_command", metavar="COMMAND")
    p.set_defaults(dev_parser=p)
    q = dev_sub.add_parser("check", parents=[common], allow_abbrev=False, help="the maintainers' check: solutions, starters, hints, docs",
                           description="The maintainers' check: every solution passes its lesson and earlier "
                                       "lessons' key tests, every starter fails for the right reason, the starters "
                                       "match the generator, every task has a hint, the docs build.")
    q.add_argument("rest", nargs=argparse.REMAINDER, help="options for the check")
    q.set_defaults(func=cmd_dev_check, needs_root=False)
    q = dev_sub.add_parser("mutate", parents=[common], allow_abbrev=False,
                           help="mutation pass over the fenced code: survivors per "
                                "lesson and a score",
                           description="Make every small edit an AST mutator can make "
                                       "inside the task "
                                       "fences of each solution, run the lesson's "
                                       "tests on each, and list "
                                       "the survivors per lesson with a score.")
    q.add_argument("rest", nargs=argparse.REMAINDER,
                   help="options for the pass (see `dev mutate --help`)")
    q.set_defaults(func=cmd_dev_mutate, needs_root=False)
    q = dev_sub.add_parser("generate", parents=[common], allow_abbrev=False,
                           help="make solutions/ from course/, then the starters in lessons/",
                           description="Make every lesson's reference snapshot "
                                       "(solutions/NN_topic/*.py) from the one annotated "
                                       "source in course/, then every starter "
                                       "(lessons/NN_topic/*.py) from its snapshot.")
    q.set_defaults(func=cmd_dev_generate, needs_root=True)
    q = dev_sub.add_parser("starters", parents=[common], allow_abbrev=False, help="regenerate lessons/*/*.py from solutions/",
                           description="Regenerate every starter (lessons/NN/agent.py) from its marked solution; "
                                       "with --check, only report starters that differ, and fail if any does.")
    q.add_argument("--check", action="store_true", help="change nothing; exit 1 if a starter is out of date")
    q.set_defaults(func=cmd_dev_starters, needs_root=True)
