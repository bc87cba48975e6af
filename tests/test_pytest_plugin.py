"""The pytest plugin: exports become test items; the zagent_replay fixture returns reports."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLES

REPLAYS = Path(__file__).parent / "replays"

pytest_plugins = ["pytester"]


def changed_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(EXAMPLES / "tools", home / "tools")
    script = home / "tools" / "word_count" / "word_count.py"
    script.write_text(script.read_text().replace("distinct", "unique"))
    return home


def test_the_fixture_replays_an_export_and_reports_a_changed_tool(zagent_replay, tmp_path: Path) -> None:
    zagent_replay(REPLAYS / "word_count.zagent.jsonl").assert_matches()
    report = zagent_replay(REPLAYS / "word_count.zagent.jsonl", home=changed_home(tmp_path))
    assert not report.matched
    assert report.differences[0].field == "output" and "+5 words, 4 unique" in report.differences[0].diff
    assert zagent_replay(REPLAYS / "word_count.zagent.jsonl", tools="recorded",
                         home=changed_home(tmp_path / "2")).matched  # served results: the tool is not run


def test_an_export_in_a_test_folder_is_a_test_that_fails_with_the_diff(pytester: pytest.Pytester,
                                                                      tmp_path: Path) -> None:
    home = changed_home(tmp_path)
    pytester.makeini(f"[pytest]\nzagent_home = {home}\nzagent_replay_allow_unsafe = true\n")
    shutil.copy(REPLAYS / "word_count.zagent.jsonl", pytester.path / "word_count.zagent.jsonl")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*DIVERGES*", "*step 2, output differs*", "*+5 words, 4 unique*",
                                 "   2. cat  1", "\\ No newline at end of file"])
