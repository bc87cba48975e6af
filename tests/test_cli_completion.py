"""Shell completion (click's): tool names and session ids of the home being typed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import forked
from click.testing import CliRunner
from conftest import python_tool

from zagent_cli.main import cli
from zagent_core.builtins import registry
from zagent_core.config import Config


def complete(words: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash completion offers for the last word of ``words`` (the zagent command line)."""
    parts = words.split(" ")
    done = forked.run([sys.executable, "-m", "zagent_cli"], stdin=subprocess.DEVNULL, capture_output=True,
                      text=True, timeout=60, env={**os.environ, **(env or {}), "_ZAGENT_COMPLETE": "bash_complete",
                                                  "COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return [line.split(",", 1)[1] for line in done.stdout.splitlines() if line]


def test_tool_names_and_session_ids_of_the_home_complete(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for name in ("greet", "grep_notes", "word_count"):
        python_tool(home, name, "print('hi')", description=f"{name} tool")
    assert complete(f"zagent --home {home} tools run gr") == ["greet", "grep", "grep_notes"]  # grep: a built-in
    # The built-ins offered: the skill tools only by a home with skills, tool_search only under lazy disclosure.
    offered = registry.enabled(Config())[0]
    assert complete(f"zagent --home {home} audit --tool ") == sorted(["greet", "grep_notes", "word_count", *offered])
    assert complete("zagent tools run g", env={"ZAGENT_HOME": str(home)}) == ["glob", "greet", "grep", "grep_notes"]
    assert complete(f"zagent --home {home} sessions show ") == []  # no journal yet: nothing, and none made
    assert not (home / "journal.db").exists()

    ran = [CliRunner().invoke(cli, ["--home", str(home), "tools", "run", "greet"]) for _ in range(2)]
    ids = [r.stderr.split("journaled as session ")[1].split(",")[0] for r in ran]
    assert sorted(complete(f"zagent --home {home} sessions show ")) == sorted(ids)
    assert complete(f"zagent --home {home} resume {ids[1][:-2]}") == [ids[1]]
    assert sorted(complete(f"zagent --home {home} audit --session ")) == sorted(ids)


def test_completion_in_a_home_that_cannot_be_read_offers_nothing_without_a_traceback(tmp_path: Path) -> None:
    not_a_home = tmp_path / "file"
    not_a_home.write_text("x")
    assert complete(f"zagent --home {not_a_home} tools run ") == []
    assert complete(f"zagent --home {not_a_home} sessions show ") == []
    broken = tmp_path / "broken"
    (broken / "tools").mkdir(parents=True)
    (broken / "journal.db").write_text("not a database")
    assert complete(f"zagent --home {broken} sessions show ") == []
