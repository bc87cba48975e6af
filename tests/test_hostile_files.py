"""File built-ins against what a hostile workspace holds: names too long for the file system,
symbolic links in a loop, a tree 1,500 folders deep, and files whose size says nothing
(``/proc``, ``/sys``). Each gets a result the model can act on, never a failure of zagent's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_builtin_search import make_engine, searcher  # noqa: F401 - searcher: a fixture

from zagent_core.tools.results import ToolResult
from zagent_store import SQLiteJournal

LONG = "n" * 300  # one name of 300 bytes: over the 255 a file name may have
DEPTH = 1500


def calls(path: str) -> list[tuple[str, dict[str, Any]]]:
    """A call of every file built-in on ``path``."""
    return [("read_file", {"path": path}), ("write_file", {"path": path, "content": "x"}),
            ("edit", {"path": path, "old_string": "a", "new_string": "b"}),
            ("multi_edit", {"path": path, "edits": [{"old_string": "a", "new_string": "b"}]}),
            ("list_files", {"path": path}), ("glob", {"pattern": "*", "path": path}),
            ("grep", {"pattern": "a", "path": path})]


def run_all(home_dir: Path, journal: SQLiteJournal, workspace: Path, path: str, confine: bool,
            ) -> dict[str, ToolResult]:
    engine = make_engine(home_dir, journal, workspace, confine_to_workspace=confine)
    with engine.start_session("test") as session:
        return {name: session.call(name, arguments) for name, arguments in calls(path)}


@pytest.mark.parametrize("confine", [False, True], ids=["free", "confined"])
@pytest.mark.parametrize("path", [LONG, f"{LONG}/file.txt", f"sub/{LONG}"], ids=["name", "folder", "below"])
def test_a_name_longer_than_the_file_system_takes_is_said_plainly(
        home_dir: Path, journal: SQLiteJournal, workspace: Path, path: str, confine: bool) -> None:
    (workspace / "sub").mkdir()
    for name, result in run_all(home_dir, journal, workspace, path, confine).items():
        assert result.is_error, (name, result.output)
        assert "zagent failed" not in result.output, (name, result.output)
        assert "longer than the 255 bytes a file name may have" in result.output \
            or "(File name too long)" in result.output, (name, result.output)


@pytest.mark.parametrize("confine", [False, True], ids=["free", "confined"])
@pytest.mark.parametrize("path", ["loop", "a/inside.txt"], ids=["self", "pair"])
def test_a_loop_of_symbolic_links_is_said_plainly(home_dir: Path, journal: SQLiteJournal, workspace: Path,
                                                  path: str, confine: bool) -> None:
    (workspace / "loop").symlink_to("loop")
    (workspace / "a").symlink_to("b")
    (workspace / "b").symlink_to("a")
    for name, result in run_all(home_dir, journal, workspace, path, confine).items():
        assert result.is_error, (name, result.output)
        assert "zagent failed" not in result.output, (name, result.output)
        assert any(words in result.output for words in (
            "runs into a loop of symbolic links", "Too many levels of symbolic links", "is a symbolic link to",
            "no such file or folder", "File exists")), (name, result.output)


@pytest.fixture
def deep(workspace: Path) -> Iterator[Path]:
    """``d/d/.../d/deep.txt``, 1,500 folders down, made and removed one level at a time
    (``os.makedirs`` and ``shutil.rmtree`` recurse, and would hit the recursion limit themselves)."""
    made = [workspace]
    folder = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(DEPTH):
            os.mkdir("d", dir_fd=folder)
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=folder)
            os.close(folder)
            folder = below
            made.append(made[-1] / "d")
        with open(os.open("deep.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=folder), "w") as handle:
            handle.write("the needle at the bottom\n")
    finally:
        os.close(folder)
    yield made[-1] / "deep.txt"
    os.unlink(made[-1] / "deep.txt")
    for level in reversed(made[1:]):
        os.rmdir(level)


def test_glob_and_grep_walk_a_tree_1500_folders_deep(home_dir: Path, journal: SQLiteJournal, workspace: Path,
                                                      deep: Path, searcher: str) -> None:  # noqa: F811
    relative = str(deep.relative_to(workspace))
    engine = make_engine(home_dir, journal, workspace)
    with engine.start_session("test") as session:
        globbed = session.call("glob", {"pattern": "**/*.txt", "metadata": False})
        grepped = session.call("grep", {"pattern": "needle"})
    assert (globbed.is_error, globbed.output) == (False, relative)
    assert (grepped.is_error, grepped.output) == (False, relative)


def test_read_file_reads_proc_and_sys_files_to_their_end(home_dir: Path, journal: SQLiteJournal,
                                                          workspace: Path) -> None:
    status = Path(f"/proc/{os.getpid()}/status")  # says 0 bytes; this very process, read by itself
    assert status.stat().st_size == 0
    engine = make_engine(home_dir, journal, workspace)
    with engine.start_session("test") as session:
        read = session.call("read_file", {"path": str(status)})
        assert not read.is_error and f"\tPid:\t{os.getpid()}\n" in read.output, read.output
        assert "is empty" not in read.output and "read on with offset" not in read.output
        sysfs = next((path for path in (Path("/sys/kernel/mm/transparent_hugepage/enabled"),
                                        Path("/sys/kernel/osrelease"), Path("/sys/power/state")) if path.is_file()),
                     None)
        if sysfs is not None:  # says 4096 bytes, whatever it holds
            shown = session.call("read_file", {"path": str(sysfs), "line_numbers": False})
            assert (shown.is_error, shown.output) == (False, sysfs.read_text().rstrip("\n")), shown.output
