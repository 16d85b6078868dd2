"""Another process for lesson 10's tests: a parent whose helper is killed mid-work.

    python helper_process.py MODULE FOLDER QUESTION

MODULE is the agent.py under test. The process starts session quest-1 in FOLDER with the
helper tool offered; the parent asks its helper QUESTION, the helper talks to the elder,
and when the helper asks the model again the process prints "helping" and waits there
for ever: the test looks at the locks, then kills it with SIGKILL.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sessionlab.course import load_module
from sessionlab.scripted import ScriptedModel, call, use
from sessionlab.town import HelperTown


def wait_for_ever(request: dict) -> None:
    print("helping", flush=True)
    while True:
        time.sleep(60)


def main(argv: list[str]) -> None:
    module_path, folder, question = argv
    lesson = load_module(Path(module_path), "sessionlab_impl.helper_process")
    model = ScriptedModel([use(call("ask_helper", question=question)),
                           use(call("talk_to", npc="elder")), wait_for_ever])
    with lesson.SessionLog(folder, "quest-1") as log:
        agent = lesson.Agent(model.client(), model=model.model, tools=HelperTown(),
                             session=log)
        agent.run("Ask a helper to find out what the elder knows.")


if __name__ == "__main__":
    main(sys.argv[1:])
