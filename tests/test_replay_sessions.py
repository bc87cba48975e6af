"""replay_sessions(): the trees of several sessions, each in its own folder and journal, and
ReplayOptions, the one object that says how."""

from __future__ import annotations

from pathlib import Path

import pytest

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import ModelReply
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_core.history.replay import ReplayOptions, replay, replay_sessions
from zagent_core.history.replay_report import ReplayReport
from zagent_store import SQLiteJournal


def record(home: Path, workspace: Path, *texts: str) -> list[str]:
    """One session per text, each answered with it; their ids, oldest first."""
    (home / "tools").mkdir(parents=True, exist_ok=True)
    ids = []
    with SQLiteJournal(home / "journal.db") as journal:
        for text in texts:
            session = Engine(Home(home), journal, workspace=workspace).start_session("run")
            Agent(session, ScriptedModel([ModelReply(text=text)])).run("hi")
            ids.append(session.session_id)
    return ids


def test_replay_sessions_replays_every_tree_oldest_first_each_in_its_own_folder(tmp_path: Path) -> None:
    ids = record(tmp_path / "home", tmp_path, "one", "two")
    heard: list[tuple[int, int, str]] = []

    def on_report(number: int, count: int, report: ReplayReport) -> None:
        heard.append((number, count, report.session_id))

    with SQLiteJournal(tmp_path / "home" / "journal.db") as journal:
        results = replay_sessions(journal, None, Home(tmp_path / "home"),
                                  lambda folder: SQLiteJournal(folder / "replay.db"), workdir=tmp_path / "work",
                                  on_report=on_report)
    assert results.matched and [r.session_id for r in results.reports] == ids
    assert heard == [(1, 2, ids[0]), (2, 2, ids[1])]
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["replay-1", "replay-2"]
    assert results.to_dict()["matched"] is True and len(results.to_dict()["replays"]) == 2
    with pytest.raises(LookupError, match="no session"):
        with SQLiteJournal(tmp_path / "home" / "journal.db") as journal:
            replay_sessions(journal, ["nope"], Home(tmp_path / "home"),
                            lambda folder: SQLiteJournal(folder / "replay.db"), workdir=tmp_path / "work2")


def test_replay_takes_its_options_as_one_object_or_as_keywords_but_not_both(tmp_path: Path) -> None:
    [session_id] = record(tmp_path / "home", tmp_path, "one")
    home = Home(tmp_path / "home")
    with SQLiteJournal(home.journal_path) as journal, SQLiteJournal(tmp_path / "replay.db") as into:
        assert replay(journal, session_id, home, into, ReplayOptions(tools="rerun"), workdir=tmp_path / "a").tools \
            == "rerun"
        with pytest.raises(TypeError, match="not both"):
            replay(journal, session_id, home, into, ReplayOptions(), tools="rerun")  # type: ignore[call-arg]


def test_replay_options_are_frozen_and_refuse_an_unknown_mode(tmp_path: Path) -> None:
    options = ReplayOptions(normalisers=[("a", "b")], workspace=str(tmp_path))  # type: ignore[arg-type]
    assert options.normalisers == (("a", "b"),) and options.workspace == tmp_path
    with pytest.raises(ValueError, match='tools must be "recorded" or "rerun"'):
        ReplayOptions(tools="Rerun")  # type: ignore[arg-type]
