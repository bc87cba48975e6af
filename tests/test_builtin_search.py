"""The search built-ins end to end: list_files, glob and grep called through a real session
and journal, grep with ripgrep and with the Python search (each test runs with both)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from zagent_core import Engine, Home
from zagent_core.builtins import grep, registry
from zagent_core.builtins.glob import split_pattern
from zagent_core.builtins.search import compile_glob, parse_rule
from zagent_core.config import BuiltinsConfig, Config, LimitsConfig
from zagent_core.journal.events import ToolCallFinished
from zagent_core.tools.results import ToolResult
from zagent_store import SQLiteJournal

RG = Path(sys.executable).parent / "rg"
Call = Callable[..., ToolResult]


@pytest.fixture(params=["rg", "python"])
def searcher(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which search grep runs: ripgrep (installed by the test extra) or the Python one."""
    if request.param == "rg" and not RG.exists():
        pytest.skip("ripgrep is installed by the test extra")
    monkeypatch.setenv("ZAGENT_RG", str(RG) if request.param == "rg" else "none")
    return str(request.param)


def make_engine(home_dir: Path, journal: SQLiteJournal, workspace: Path, timeout: float = 120,
                **builtins: bool) -> Engine:
    config = Config(limits=LimitsConfig(kill_grace_seconds=0.3, default_timeout_seconds=timeout),
                    builtins=BuiltinsConfig(**builtins))
    return Engine(Home(home_dir), journal, workspace=workspace, config=config)


@pytest.fixture
def call(engine: Engine) -> Iterator[Call]:
    with engine.start_session("test") as session:
        def run(name: str, **arguments: object) -> ToolResult:
            return session.call(name, arguments)
        yield run


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


@pytest.fixture
def tree(workspace: Path) -> Path:
    (workspace / ".git").mkdir()  # a repository: its .gitignore counts
    write(workspace, {
        "README.md": "# demo\nretries are configured in src/config.py\n",
        "src/config.py": "RETRIES = 3\n\ndef retry(n):\n    return n * RETRIES\n",
        "src/app.py": "from config import retry\n\nprint(retry(2))\n",
        "src/ui/view.ts": "const retries = 3;\nexport default retries;\n",
        "build/out.py": "RETRIES = 99\n",
        "notes.txt": "Retry later\n",
        ".env": "RETRIES=5\n",
        ".gitignore": "build/\n*.log\n",
        "debug.log": "RETRIES in a log\n",
    })
    return workspace


# -- the family ---------------------------------------------------------------------------


def test_search_builtins_are_registered_replay_safe_and_concurrency_safe() -> None:
    tools = registry.all_builtins()
    names = list(tools)
    assert names[names.index("list_files"):][:3] == ["list_files", "glob", "grep"]  # offered in the order
    for name in ("list_files", "glob", "grep"):
        assert tools[name].replay == "safe"
        assert tools[name].is_concurrency_safe({"pattern": "x", "path": "."})


# -- list_files ----------------------------------------------------------------------------


def test_list_files_lists_one_folder_sorted_with_folders_and_links_marked(tree: Path, call: Call) -> None:
    (tree / "link.py").symlink_to("src/app.py")
    (tree / "srclink").symlink_to("src")
    result = call("list_files")
    assert not result.is_error
    assert result.output.splitlines() == [
        ".env", ".git/", ".gitignore", "README.md", "build/", "debug.log", "link.py -> src/app.py", "notes.txt", "src/",
        "srclink/ -> src"]
    assert call("list_files", path="src").output.splitlines() == ["app.py", "config.py", "ui/"]


def test_list_files_says_what_is_wrong_with_the_path(tree: Path, call: Call) -> None:
    missing = call("list_files", path="nope")
    assert missing.is_error and missing.output.startswith("no such file or folder: nope")
    a_file = call("list_files", path="src/app.py")
    assert a_file.is_error
    assert a_file.output == "src/app.py is a file, not a folder; read it with read_file, or list its folder (src)"
    (tree / "empty").mkdir()
    assert call("list_files", path="empty").output == "empty is an empty folder"
    (tree / "dangling").symlink_to("gone")
    dangling = call("list_files", path="dangling")
    assert dangling.is_error and dangling.output == "dangling is a symbolic link to gone, which does not exist"


def test_list_files_shows_1000_entries_and_says_how_many_there_are(workspace: Path, call: Call) -> None:
    for index in range(1005):
        (workspace / f"f{index:04}").touch()
    lines = call("list_files").output.splitlines()
    assert len(lines) == 1001
    assert lines[0] == "f0000" and lines[999] == "f0999"
    assert lines[-1] == "[1000 of 1005 entries shown; use glob with a pattern to find the others]"


# -- glob ------------------------------------------------------------------------------------


def test_glob_finds_files_across_folders_with_size_and_time(tree: Path, call: Call) -> None:
    result = call("glob", pattern="**/*.py")
    rows = [line.split("\t") for line in result.output.splitlines()]
    assert [row[0] for row in rows] == ["src/app.py", "src/config.py"]  # build/ is .gitignored
    assert rows[0][1] == str((tree / "src/app.py").stat().st_size)
    assert rows[0][2].endswith("Z") and "T" in rows[0][2]
    plain = call("glob", pattern="src/**/*.{py,ts}", metadata=False)
    assert plain.output.splitlines() == ["src/app.py", "src/config.py", "src/ui/view.ts"]
    assert call("glob", pattern="*.py", path="src", metadata=False).output == "src/app.py\nsrc/config.py"
    assert call("glob", pattern="*.md", metadata=False).output == "README.md"


def test_glob_matches_star_within_one_folder_only(tree: Path, call: Call) -> None:
    assert call("glob", pattern="*.py").output == "No files found"
    assert call("glob", pattern="src/*", metadata=False).output == "src/app.py\nsrc/config.py"


def test_glob_and_list_files_reach_outside_the_workspace_unless_confined(home_dir: Path, journal: SQLiteJournal,
                                                            tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    write(tmp_path, {"ws/a.txt": "a", "other/b.txt": "b"})
    with make_engine(home_dir, journal, workspace).start_session("test") as session:
        assert session.call("glob", {"pattern": "../other/*.txt", "metadata": False}).output == str(
            tmp_path / "other" / "b.txt")
        assert session.call("list_files", {"path": "../other"}).output == "b.txt"
    with make_engine(home_dir, journal, workspace, confine_to_workspace=True).start_session("test") as session:
        refused = session.call("glob", {"pattern": "../other/*.txt"})
        assert refused.is_error and "outside the workspace" in refused.output
        assert "confine_to_workspace" in refused.output
        listing = session.call("list_files", {"path": str(tmp_path / "other")})
        assert listing.is_error and "outside the workspace" in listing.output
        assert session.call("glob", {"pattern": "*.txt", "metadata": False}).output == "a.txt"


def test_glob_caps_at_1000_files_after_leaving_folders_out(workspace: Path, call: Call) -> None:
    for index in range(1003):
        (workspace / f"d{index:04}").mkdir()
        (workspace / f"d{index:04}" / "x.txt").touch()
    lines = call("glob", pattern="**/*", metadata=False).output.splitlines()
    assert len(lines) == 1001 and lines[0] == "d0000/x.txt"
    assert lines[-1] == "[1000 of 1003 files shown; narrow the pattern or the path]"


def test_glob_messages(tree: Path, call: Call) -> None:
    assert call("glob", pattern="nowhere/*.py").output == "No files found (the folder nowhere does not exist)"
    missing = call("glob", pattern="*.py", path="nowhere")
    assert missing.is_error and missing.output.startswith("no such file or folder: nowhere")
    a_file = call("glob", pattern="*", path="notes.txt")
    assert a_file.is_error and "notes.txt is a file, not a folder" in a_file.output
    bad = call("glob", pattern="src/[ab")
    assert bad.is_error and bad.output == "unclosed [ at position 4 in glob 'src/[ab'"


def test_glob_does_not_enter_linked_folders_and_finds_unicode_names(workspace: Path, call: Call) -> None:
    write(workspace, {"données/été.txt": "x", "real/a.txt": "x", "with space/b c.txt": "x"})
    (workspace / "linked").symlink_to("real")
    found = call("glob", pattern="**/*.txt", metadata=False).output.splitlines()
    assert found == ["données/été.txt", "real/a.txt", "with space/b c.txt"]


def test_glob_patterns_read_like_gitignore_globs() -> None:
    assert split_pattern("../a/**/*.py") == ("../a", "**/*.py")
    assert split_pattern("/abs/x/*.py") == ("/abs/x", "*.py")
    assert split_pattern("*.py") == ("", "*.py")
    assert compile_glob("**/*.py").fullmatch("a/b/c.py") and compile_glob("**/*.py").fullmatch("c.py")
    assert not compile_glob("*.py").fullmatch("a/c.py")
    assert compile_glob("a/**").fullmatch("a/b/c") and not compile_glob("a/**").fullmatch("a")
    assert compile_glob("[!a]?.{md,txt}").fullmatch("bc.md") and not compile_glob("[!a]?.md").fullmatch("ac.md")
    anchored, loose = parse_rule("/build"), parse_rule("build/")
    assert anchored is not None and anchored.regex.fullmatch("build") and not anchored.regex.fullmatch("x/build")
    assert loose is not None and loose.dir_only and loose.regex.fullmatch("x/build")
    assert parse_rule("# comment") is None and parse_rule("   ") is None
    negated = parse_rule("!keep.py")
    assert negated is not None and negated.negated


# -- grep -------------------------------------------------------------------------------------


def test_grep_lists_matching_files_respecting_gitignore_and_hidden(tree: Path, call: Call, searcher: str) -> None:
    result = call("grep", pattern="RETRIES")
    assert not result.is_error
    assert result.output == "src/config.py"  # not build/ nor debug.log (.gitignore), nor .env (hidden)
    assert call("grep", pattern="retr", **{"-i": True}).output.splitlines() == [
        "README.md", "notes.txt", "src/app.py", "src/config.py", "src/ui/view.ts"]


def test_grep_content_has_line_numbers_and_context(tree: Path, call: Call, searcher: str) -> None:
    result = call("grep", pattern="RETRIES", output_mode="content")
    assert result.output == "src/config.py:1:RETRIES = 3\nsrc/config.py:4:    return n * RETRIES"
    no_numbers = call("grep", pattern="RETRIES", output_mode="content", **{"-n": False})
    assert no_numbers.output == "src/config.py:RETRIES = 3\nsrc/config.py:    return n * RETRIES"
    context = call("grep", pattern="^def", path="src", output_mode="content", **{"-C": 1})
    assert context.output == "src/config.py-2-\nsrc/config.py:3:def retry(n):\nsrc/config.py-4-    return n * RETRIES"
    after = call("grep", pattern="import|print", path="src/app.py", output_mode="content", **{"-A": 1})
    assert after.output == "src/app.py:1:from config import retry\nsrc/app.py-2-\nsrc/app.py:3:print(retry(2))"
    gap = call("grep", pattern="RETRIES", path="src", output_mode="content", **{"-B": 1})
    assert gap.output.splitlines() == ["src/config.py:1:RETRIES = 3", "--", "src/config.py-3-def retry(n):",
                                       "src/config.py:4:    return n * RETRIES"]


def test_grep_counts_and_filters_by_glob_and_type(tree: Path, call: Call, searcher: str) -> None:
    assert call("grep", pattern="retr", output_mode="count", **{"-i": True}, type="py").output == (
        "src/app.py:2\nsrc/config.py:3")
    assert call("grep", pattern="retries", glob="*.ts").output == "src/ui/view.ts"
    # A glob decides over .gitignore for the files it names, as in ripgrep (an ignored folder
    # is still not entered).
    assert call("grep", pattern="RETRIES", glob="*.log").output == "debug.log"
    assert call("grep", pattern="RETRIES", glob="*.py").output == "src/config.py"
    assert call("grep", pattern="retr", glob="!*.py", **{"-i": True}).output == (
        "README.md\nnotes.txt\nsrc/ui/view.ts")


def test_grep_multiline_lets_a_match_span_lines(tree: Path, call: Call, searcher: str) -> None:
    result = call("grep", pattern="RETRIES = 3\\n\\ndef", output_mode="content", multiline=True)
    assert result.output == "src/config.py:1:RETRIES = 3\nsrc/config.py:2:\nsrc/config.py:3:def retry(n):"
    refused = call("grep", pattern="3\\ndef")
    assert refused.is_error
    assert refused.output == ("the pattern '3\\\\ndef' matches a line break, and lines are searched one by one; "
                              "set multiline: true to let a match span lines")


def test_grep_pages_output_lines_with_head_limit_and_offset(workspace: Path, call: Call, searcher: str) -> None:
    write(workspace, {f"f{index:03}.txt": "hit\n" for index in range(300)})
    first = call("grep", pattern="hit").output.splitlines()
    assert len(first) == 251 and first[0] == "f000.txt" and first[249] == "f249.txt"
    assert first[-1] == "[more results: call again with offset=250]"
    rest = call("grep", pattern="hit", offset=250).output.splitlines()
    assert rest[0] == "f250.txt" and rest[-1] == "f299.txt" and len(rest) == 50
    page = call("grep", pattern="hit", head_limit=2, offset=10, output_mode="count").output
    assert page == "f010.txt:1\nf011.txt:1\n[more results: call again with offset=12]"
    assert len(call("grep", pattern="hit", head_limit=0).output.splitlines()) == 300
    assert call("grep", pattern="hit", offset=400).output == "no more results past offset 400 (300 in all)"


def test_a_minified_file_cannot_flood_the_model(workspace: Path, call: Call, searcher: str) -> None:
    write(workspace, {"app.min.js": "var a=1;" * 200_000, "many.txt": ("word " * 300 + "\n") * 2000})
    one_line = call("grep", pattern="var", output_mode="content", path="app.min.js").output
    assert one_line.startswith("app.min.js:1:var a=1;")
    assert one_line.endswith(f"… [line clipped: {8 * 200_000 - 500} more characters]")
    assert len(one_line) < 700
    flood = call("grep", pattern="word", output_mode="content", head_limit=0).output
    assert len(flood.encode()) <= 32 * 1024
    assert flood.splitlines()[-1].startswith("[output capped at ")
    assert "call again with offset=" in flood.splitlines()[-1]


def test_grep_says_what_is_wrong(tree: Path, call: Call, searcher: str) -> None:
    bad = call("grep", pattern="retry(")
    assert bad.is_error
    assert bad.output == ("the pattern 'retry(' is not a valid regular expression: missing ), unterminated "
                          "subpattern at position 5")
    missing = call("grep", pattern="x", path="nowhere")
    assert missing.is_error and missing.output.startswith("no such file or folder: nowhere (looked at ")
    assert call("grep", pattern="nothing-like-this").output == "No files found"
    assert call("grep", pattern="nothing", output_mode="content").output == "No matches found"
    (tree / "blob.bin").write_bytes(b"RETRIES\x00\x01")
    binary = call("grep", pattern="RETRIES", path="blob.bin")
    assert binary.output == "blob.bin is a binary file; grep searches text files" and not binary.is_error
    assert "blob.bin" not in call("grep", pattern="RETRIES").output
    bad_glob = call("grep", pattern="x", glob="src/{a,b")
    assert bad_glob.is_error and bad_glob.output == "unclosed { at position 4 in glob 'src/{a,b'"
    unknown = call("grep", pattern="x", type="python")
    assert unknown.is_error and "grep was not run" in unknown.output and "py" in unknown.output


def test_ripgrep_rejects_what_its_regex_engine_lacks_with_its_reason(tree: Path, call: Call, searcher: str) -> None:
    result = call("grep", pattern="(?<=def )retry")
    if searcher == "python":
        assert result.output == "src/config.py"
        return
    assert result.is_error
    assert result.output.startswith("the pattern '(?<=def )retry' is not a valid regular expression for ripgrep: ")
    assert "look-around" in result.output


def test_grep_confinement_on_and_off(home_dir: Path, journal: SQLiteJournal, tmp_path: Path, searcher: str) -> None:
    workspace = tmp_path / "ws"
    write(tmp_path, {"ws/a.txt": "needle", "outside/b.txt": "needle"})
    (workspace / "out").symlink_to(tmp_path / "outside")
    with make_engine(home_dir, journal, workspace).start_session("test") as session:
        assert session.call("grep", {"pattern": "needle", "path": "../outside"}).output == str(
            tmp_path / "outside" / "b.txt")
        assert session.call("grep", {"pattern": "needle", "path": "out"}).output == "out/b.txt"
    with make_engine(home_dir, journal, workspace, confine_to_workspace=True).start_session("test") as session:
        for path in ("../outside", "out", str(tmp_path / "outside" / "b.txt")):
            refused = session.call("grep", {"pattern": "needle", "path": path})
            assert refused.is_error and "outside the workspace" in refused.output, path
        assert session.call("grep", {"pattern": "needle"}).output == "a.txt"


def test_grep_does_not_follow_links_and_finds_unicode_names(workspace: Path, call: Call, searcher: str) -> None:
    write(workspace, {"données/été.txt": "café\n", "real/a.txt": "café\n", "with space/b c.txt": "café\n"})
    (workspace / "linked").symlink_to("real")
    (workspace / "file-link.txt").symlink_to("real/a.txt")
    assert call("grep", pattern="café").output.splitlines() == [
        "données/été.txt", "real/a.txt", "with space/b c.txt"]
    assert call("grep", pattern="CAFÉ", output_mode="content", path="données", **{"-i": True}).output == (
        "données/été.txt:1:café")


def test_grep_nested_gitignores_negation_and_anchors(workspace: Path, call: Call, searcher: str) -> None:
    (workspace / ".git").mkdir()
    write(workspace, {
        ".gitignore": "*.gen\n/top.txt\ncache/\n",
        "top.txt": "x\n", "sub/top.txt": "x\n", "a.gen": "x\n",
        "sub/.gitignore": "!keep.gen\n", "sub/keep.gen": "x\n", "sub/drop.gen": "x\n",
        "sub/cache/c.txt": "x\n", "cache.txt": "x\n",
    })
    assert call("grep", pattern="x").output.splitlines() == [
        "cache.txt", "sub/keep.gen", "sub/top.txt"]
    # The .gitignore files above the searched folder apply too.
    assert call("grep", pattern="x", path="sub").output.splitlines() == ["sub/keep.gen", "sub/top.txt"]


def test_a_search_that_takes_too_long_is_stopped_with_a_message(home_dir: Path, journal: SQLiteJournal,
                                                                 workspace: Path, searcher: str) -> None:
    write(workspace, {f"d{index}/f.txt": "x\n" for index in range(50)})
    with make_engine(home_dir, journal, workspace, timeout=1e-9).start_session("test") as session:
        result = session.call("grep", {"pattern": "x"})
    assert result.is_error
    assert result.output == ("the search took longer than 1e-09 s and was stopped; search a smaller folder or "
                             "narrow it with glob or type")


def test_gitignore_counts_inside_a_repository_only_and_up_to_its_top(tmp_path: Path, home_dir: Path,
                                                                    journal: SQLiteJournal, searcher: str) -> None:
    write(tmp_path, {
        ".gitignore": "*\n",  # as in a home folder kept in git: it must not hide the projects below
        "ws/.gitignore": "*.log\n", "ws/a.log": "x\n", "ws/a.txt": "x\n",
        "ws/repo/.gitignore": "*.tmp\n", "ws/repo/b.tmp": "x\n", "ws/repo/b.log": "x\n", "ws/repo/b.txt": "x\n",
        "ws/repo/.git": "gitdir: elsewhere\n",  # a worktree's .git is a file
    })
    with make_engine(home_dir, journal, tmp_path / "ws").start_session("test") as session:
        assert session.call("grep", {"pattern": "x"}).output.splitlines() == [
            "a.log", "a.txt", "repo/b.log", "repo/b.txt"]
        assert session.call("grep", {"pattern": "x", "path": "repo"}).output.splitlines() == [
            "repo/b.log", "repo/b.txt"]
        assert session.call("glob", {"pattern": "**/b.*", "metadata": False}).output.splitlines() == [
            "repo/b.log", "repo/b.txt"]


def test_grep_calls_are_journaled_as_builtins(tree: Path, engine: Engine, searcher: str) -> None:
    with engine.start_session("test") as session:
        session.call("grep", {"pattern": "RETRIES"})
    started = [s.event for s in engine.journal.read(session.session_id) if s.event.type == "tool_call_started"]
    assert [event.identity for event in started] == ["builtin:grep"]  # type: ignore[union-attr]


def test_a_name_that_is_not_utf8_is_shown_with_a_replacement_character_and_journaled(
        engine: Engine, workspace: Path, searcher: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A name made of bytes: Python reads it back with a lone surrogate, which no journal can store.
    with open(os.path.join(os.fsencode(workspace), b"caf\xe9.txt"), "wb") as handle:
        handle.write(b"needle\n")
    os.symlink(b"caf\xe9.txt", os.path.join(os.fsencode(workspace), b"link"))
    name = "caf\ufffd.txt"
    with engine.start_session("test") as session:
        calls = [
            ("list_files", {}, f"{name}\nlink -> {name}"),
            ("glob", {"pattern": "*.txt", "metadata": False}, name),
            ("glob", {"pattern": "**", "metadata": False}, name),
            ("grep", {"pattern": "needle"}, name),
            ("grep", {"pattern": "needle", "output_mode": "content"}, f"{name}:1:needle"),
            ("grep", {"pattern": "needle", "output_mode": "count"}, f"{name}:1"),
        ]
        for tool, arguments, shown in calls:
            result = session.call(tool, arguments)
            assert (result.output, result.is_error) == (shown, False), tool
        # Found by its real name: its size is read, and ripgrep reads it again when content is read file by file.
        assert session.call("glob", {"pattern": "caf*"}).output.startswith(f"{name}\t7\t")
        monkeypatch.setattr(grep, "CONTENT_BUFFER", 0)
        assert session.call("grep", {"pattern": "needle", "output_mode": "content"}).output == f"{name}:1:needle"
    finished = [s.event for s in engine.journal.read(session.session_id) if isinstance(s.event, ToolCallFinished)]
    assert [event.output for event in finished[:len(calls)]] == [shown for _, _, shown in calls]
