"""What the CLI prints for a person cannot drive the terminal; what it prints as JSON is exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import forked
from conftest import python_tool
from hypothesis import given
from hypothesis import strategies as st

from zagent_cli.output import terminal_safe

# An OSC that sets the window title, a CSI that clears the screen, a C1 CSI, a bell, a CR.
HOSTILE = "A\x1b]0;pwned\x07B\x1b[2JC\x9b31mD\rE\x7f"


def zagent(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "zagent_cli", "--home", str(home), *args], stdin=subprocess.DEVNULL,
                      capture_output=True, text=True, encoding="utf-8")


def controls(text: str) -> set[str]:
    return {c for c in text if (ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) < 0xA0}


def test_tool_output_notes_and_descriptions_are_shown_not_sent_to_the_terminal(tmp_path: Path) -> None:
    home = tmp_path / "home"
    code = f"""import os
with open(os.environ["ZAGENT_NOTIFY_FILE"], "a") as notes:
    notes.write({HOSTILE!r}.replace("\\r", "") + "\\n")
print({HOSTILE!r})
"""
    python_tool(home, "evil", code, description="evil\x1b]0;title\x07 tool")
    printed = [zagent(home, "tools", "run", "evil"), zagent(home, "tools", "list"),
               zagent(home, "sessions", "show", "--events"), zagent(home, "audit")]
    for done in printed:
        assert done.returncode == 0, done.stderr
        assert controls(done.stdout + done.stderr) == set(), done.args
    run = printed[0].stdout
    assert "A\\x1b]0;pwned\\x07B\\x1b[2JC\\x9b31mD\\x0dE\\x7f" in run  # what the tool printed, visibly
    assert "[info: A\\x1b]0;pwned" in run
    assert "evil\\x1b]0;title\\x07 tool" in printed[1].stdout
    assert "A\\x1b]0;pwned" in printed[3].stdout


def test_json_output_keeps_the_exact_text(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "evil", f"print({HOSTILE!r}, end='')")
    done = zagent(home, "tools", "run", "evil", "--json")
    assert controls(done.stdout) == set()
    assert json.loads(done.stdout)["output"] == HOSTILE
    state = json.loads(zagent(home, "sessions", "show", "--json").stdout)
    assert next(iter(state["calls"].values()))["output"] == HOSTILE
    (call,) = json.loads(zagent(home, "audit", "--json").stdout)["calls"]
    assert call["output_head"] == HOSTILE


@given(st.text())
def test_terminal_safe_leaves_no_control_character_and_keeps_the_rest(text: str) -> None:
    shown = terminal_safe(text)
    assert controls(shown) == set()
    assert all("\ud800" > c or c > "\udfff" for c in shown)
    if not controls(text) and text.isprintable():
        assert shown == text


def test_the_conversation_zagent_run_prints_shows_what_the_model_wrote(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": f"hello {HOSTILE}"}]))
    done = zagent(home, "run", "--model", f"scripted:{script}", f"hi \x1b[31m")
    assert done.returncode == 0, done.stderr
    assert controls(done.stdout + done.stderr) == set()
    assert "user: hi \\x1b[31m" in done.stdout and "assistant: hello A\\x1b]0;pwned" in done.stdout


@pytest.mark.xfail(strict=True, reason="the tool_calls view's output_head is json_extract(...), which SQLite cuts at "
                                       "the first NUL; the fix belongs in zagent_store/views.py")
def test_audit_shows_an_output_past_a_nul(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "nul", "print('before\\x00after', end='')")
    assert json.loads(zagent(home, "tools", "run", "nul", "--json").stdout)["output"] == "before\x00after"
    assert "before\\x00after" in zagent(home, "audit").stdout


def _on_a_terminal(home: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """What zagent writes to stdout and stderr when both are a terminal (a pseudo-terminal here)."""
    import os
    import pty

    leader, follower = pty.openpty()
    proc = forked.Popen([sys.executable, "-m", "zagent_cli", "--home", str(home), *args],
                        stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env={**os.environ, **(env or {})})
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    proc.wait(timeout=60)
    return b"".join(chunks).decode("utf-8", "replace")


def test_outcomes_are_coloured_on_a_terminal_but_not_with_no_color_nor_when_piped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "evil", f"print({HOSTILE!r})")
    shown = _on_a_terminal(home, "tools", "run", "evil")
    assert "\x1b[32m[ok in " in shown  # green: zagent's own word on the outcome
    assert "\x1b]" not in shown and "\x1b[2J" not in shown  # what the tool wrote is still only shown
    assert "\x1b[32mall good" in _on_a_terminal(home, "doctor")
    plain = _on_a_terminal(home, "tools", "run", "evil", env={"NO_COLOR": "1"})
    assert "[ok in " in plain and "\x1b[3" not in plain
    piped = zagent(home, "tools", "run", "evil")
    assert "[ok in " in piped.stderr and "\x1b[" not in piped.stderr


def test_tools_list_pads_every_column(tmp_path: Path) -> None:
    home = tmp_path / "home"
    python_tool(home, "a", "", description="Short.")
    python_tool(home, "long_name", "", description="A description long enough to be cut at the column's width, "
                                                   "which is seventy-two characters here.")
    python_tool(home, "mid", "", description="Middling description.")
    lines = zagent(home, "tools", "list").stdout.split("\n\n")[0].splitlines()  # the built-ins follow a blank line
    assert len(lines) == 3
    assert len({line.index("[tools/") for line in lines}) == 1, lines  # the folder column is one column
    assert len({line.index(line.split()[1]) for line in lines}) == 1, lines
    assert lines[1].split("  [tools/")[0].rstrip().endswith("...") and len(lines[1].split("  ", 1)[1]) < 100
