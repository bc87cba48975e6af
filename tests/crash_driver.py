"""A session for crash tests: run it, SIGKILL it anywhere, then resume and check.

``python crash_driver.py HOME WORKSPACE`` prints ``SESSION <id>`` first, then
``SEQ <n>`` for every event once it is committed (so the test knows what was
acknowledged), then ``DONE``. It leaves the session open, as a crash would.
Set ``ZAGENT_CRASH_AT`` to make the engine kill itself at a named point.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

from zagent_core import Engine, Home
from zagent_core.config import Config, LimitsConfig
from zagent_core.journal.protocol import Journal
from zagent_store import open_journal

NOTE = textwrap.dedent(
    """
    import json, os, sys, time
    def note(text, wake=False):
        with open(os.environ["ZAGENT_NOTIFY_FILE"], "a") as f:
            f.write((json.dumps({"text": text, "wake": True}) if wake else text) + "\\n")
    args = json.load(sys.stdin)
    """
)
TOOLS = {
    "fg_notes": ({}, "for i in range(args['n']):\n    note(f'fg {i}'); time.sleep(0.02)\nprint('fg done')\n"),
    "fg_safe": ({"replay": "safe"}, "for i in range(args['n']):\n    note(f'safe {i}'); time.sleep(0.02)\nprint('safe')\n"),
    "bg_notes": (
        {"background": True},
        "for i in range(args['n']):\n    note(f'bg {i}'); time.sleep(0.03)\nnote('bg wants you', wake=True)\n"
        "print('bg done')\n",
    ),
}


def install_tools(home: Path) -> None:
    for name, (extra, body) in TOOLS.items():
        folder = home / "tools" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "main.py").write_text(NOTE + body)
        manifest = {
            "description": f"crash-test tool {name}",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            "command": [sys.executable, "main.py"],
            **extra,
        }
        (folder / f"{name}.json").write_text(json.dumps(manifest))


def journal_of(home: Path) -> Journal:
    """The journal under test: ``$ZAGENT_JOURNAL`` (a test run on PostgreSQL sets it), else the home's file."""
    return open_journal(os.environ.get("ZAGENT_JOURNAL") or f"sqlite:///{home / 'journal.db'}")


def engine_for(home: Path, workspace: Path, journal: Journal) -> Engine:
    return Engine(Home(home), journal, workspace=workspace, config=Config(limits=LimitsConfig(kill_grace_seconds=0.2)))


def main(home: Path, workspace: Path) -> None:
    journal = journal_of(home)
    session = engine_for(home, workspace, journal).start_session("crash-test")
    print("SESSION", session.session_id, flush=True)
    # One write per line: the task watcher's thread reports too, and print() writes its parts one by
    # one, so two threads' lines could interleave ("SEQ 22SEQ 23").
    session.subscribe(lambda stored: (sys.stdout.write(f"SEQ {stored.seq}\n"), sys.stdout.flush()))
    session.call("bg_notes", {"n": 4})
    session.call("fg_notes", {"n": 5})
    session.call("fg_safe", {"n": 3})
    session.call("bg_notes", {"n": 2})
    session.call("fg_notes", {"n": 3})
    session.call("terminal", {"action": "wait", "task": 1, "timeout_seconds": 5})
    session.wait_task("2", 5)
    print("DONE", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
