"""The README's main job, through the library: an example tool runs and is journaled."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import EXAMPLES

from zagent_core import Engine, Home


def test_word_count_example_runs_and_is_journaled(home_dir: Path, journal, workspace: Path) -> None:
    shutil.copytree(EXAMPLES / "tools" / "word_count", home_dir / "tools" / "word_count")
    engine = Engine(Home(home_dir), journal, workspace=workspace)
    with engine.start_session("test") as session:
        result = session.call("word_count", {"text": "the cat and the hat", "top": 1})
    assert not result.is_error
    assert "the" in result.output and "5 words" in result.output
    types = [e.event.type for e in journal.read(session.session_id)]
    assert types == ["session_started", "tool_call_requested", "tool_call_started", "tool_call_finished",
                     "session_ended"]
    assert engine.session_state(session.session_id) == session.state
