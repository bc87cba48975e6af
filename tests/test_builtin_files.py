"""The file built-ins (read_file, write_file, edit, multi_edit) through a real engine and journal.

Every result text a model can get from them, the paths they take (spaces, unicode,
symlinks, ``../``, absolute; confinement on and off), and hypothesis: ``edit`` gives the
file ``str.replace`` gives wherever the match is unique. The gate across a crash, and
the journal rebuild, are in ``test_read_state.py``.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_calls import tiny_png

from zagent_core import Engine, Home
from zagent_core.builtins import beneath, files, registry
from zagent_core.config import BuiltinsConfig, CapabilitiesConfig, Config, LimitsConfig
from zagent_core.session.engine import Session
from zagent_store import SQLiteJournal


def make_session(home: Path, journal: SQLiteJournal, workspace: Path, **builtins: Any) -> Session:
    config = Config(limits=LimitsConfig(kill_grace_seconds=0.3), builtins=BuiltinsConfig(**builtins))
    return Engine(Home(home), journal, workspace=workspace, config=config).start_session("test")


@pytest.fixture
def session(home_dir: Path, journal: SQLiteJournal, workspace: Path) -> Iterator[Session]:
    with make_session(home_dir, journal, workspace) as live:
        yield live


def ok(session: Session, tool: str, **arguments: Any) -> str:
    result = session.call(tool, arguments)
    assert not result.is_error, result.output
    return result.output


def refused(session: Session, tool: str, **arguments: Any) -> str:
    result = session.call(tool, arguments)
    assert result.is_error, result.output
    return result.output


def lines_file(path: Path, count: int, width: int = 0) -> str:
    text = "".join(f"line {n}{'x' * width}\n" for n in range(1, count + 1))
    path.write_text(text)
    return text


_NAMES = itertools.count()


# -- read_file ----------------------------------------------------------------------------


def test_read_file_numbers_lines_and_says_how_to_read_on(session: Session, workspace: Path) -> None:
    lines_file(workspace / "a.txt", 5)
    assert ok(session, "read_file", path="a.txt") == "".join(f"{n:>6}\tline {n}\n" for n in range(1, 6)).rstrip()
    assert ok(session, "read_file", path="a.txt", offset=2, limit=2) == (
        "     2\tline 2\n     3\tline 3\n[lines 2-3 of 5 shown; read on with offset 4]")
    assert ok(session, "read_file", path="a.txt", offset=4, line_numbers=False) == "line 4\nline 5"


def test_read_file_shows_2000_lines_by_default(session: Session, workspace: Path) -> None:
    lines_file(workspace / "long.txt", 2500)
    output = ok(session, "read_file", path="long.txt")
    assert output.endswith("  2000\tline 2000\n[lines 1-2000 of 2500 shown; read on with offset 2001]")
    assert ok(session, "read_file", path="long.txt", offset=2001).endswith("  2500\tline 2500")


def test_read_file_gives_a_large_file_in_mib(session: Session, workspace: Path) -> None:
    text = lines_file(workspace / "log.txt", 60_000, width=20)
    mib = f"{len(text.encode()) / 2**20:.1f}"
    assert ok(session, "read_file", path="log.txt", offset=59_999, limit=1).endswith(
        f"[lines 59999-59999 of a {mib} MiB file shown; read on with offset 60000]")
    assert ok(session, "read_file", path="log.txt", offset=60_000).startswith(" 60000\tline 60000")
    assert refused(session, "read_file", path="log.txt", offset=60_001) == (
        "offset 60001 is past the end of log.txt, which has 60000 lines; use an offset from 1 to 60000")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.text(alphabet="ab é", max_size=5), min_size=1, max_size=30), end_newline=st.booleans(),
       offset=st.integers(1, 35), limit=st.integers(1, 35))
def test_read_file_shows_the_slice_cat_n_would(session: Session, workspace: Path, lines: list[str],
                                                 end_newline: bool, offset: int, limit: int) -> None:
    text = "\n".join(lines) + ("\n" if end_newline else "")
    if not text:
        return
    name = f"s{next(_NAMES)}.txt"  # a new file each time: a re-read of the same one would be the stub
    (workspace / name).write_text(text)
    all_lines = text.splitlines(keepends=True)
    result = session.call("read_file", {"path": name, "offset": offset, "limit": limit})
    if offset > len(all_lines):
        assert result.is_error and f"is past the end of {name}" in result.output
        return
    shown = all_lines[offset - 1:offset - 1 + limit]
    body = "".join(f"{n:>6}\t{line}" for n, line in enumerate(shown, start=offset)).removesuffix("\n")
    last = offset + len(shown) - 1
    footer = (f"\n[lines {offset}-{last} of {len(all_lines)} shown; read on with offset {last + 1}]"
              if last < len(all_lines) else "")
    assert (result.output, result.is_error) == (body + footer, False)


def test_read_file_stops_at_256_kib(session: Session, workspace: Path) -> None:
    lines_file(workspace / "wide.txt", 400, width=1000)
    output = ok(session, "read_file", path="wide.txt")
    assert len(output.encode()) < files.READ_BYTE_CAP + 200
    last = output.splitlines()[-2].split("\t")[0].strip()
    assert output.splitlines()[-1] == (f"[lines 1-{last} of 400 shown (the 256 KiB cap of one read was reached); "
                                       f"read on with offset {int(last) + 1}]")


def test_read_file_cuts_one_huge_line(session: Session, workspace: Path) -> None:
    (workspace / "min.js").write_text("x" * 600_000 + "\nafter\n")
    output = ok(session, "read_file", path="min.js")
    assert len(output.encode()) < files.READ_BYTE_CAP + 300
    assert output.endswith("[line 1 is 600001 bytes and was cut at the 256 KiB cap of one read; the rest of that "
                           "line is not shown: search it with grep, or cut it with shell]")


def test_read_file_marks_binary_and_empty_files(session: Session, workspace: Path) -> None:
    (workspace / "blob").write_bytes(b"\x7fELF\x00\x01\x02" * 10)
    (workspace / "latin1.txt").write_bytes("caf\xe9 ".encode("latin-1") * 50)
    (workspace / "empty.txt").write_text("")
    assert ok(session, "read_file", path="blob") == "[binary file: blob (70 bytes); not shown as text]"
    assert ok(session, "read_file", path="latin1.txt") == "[binary file: latin1.txt (250 bytes); not shown as text]"
    assert ok(session, "read_file", path="empty.txt") == "(empty.txt is empty)"


def test_read_file_attaches_an_image_when_the_model_can_see(home_dir: Path, journal: SQLiteJournal,
                                                          workspace: Path) -> None:
    (workspace / "dot.png").write_bytes(tiny_png())
    size = len(tiny_png())
    for vision, expected in [(True, f"[image: dot.png ({size} bytes, image/png), attached for you to see]"),
                             (False, f"[image: dot.png ({size} bytes, image/png); not attached: the model cannot "
                                     "take vision (vision=false)]")]:
        config = Config(capabilities=CapabilitiesConfig(vision=vision))
        with Engine(Home(home_dir), journal, workspace=workspace, config=config).start_session("t") as live:
            result = live.call("read_file", {"path": "dot.png"})
        assert (result.output, result.is_error) == (expected, False)
        assert [(m.path, m.mime, m.size) for m in result.media] == (
            [(str(workspace / "dot.png"), "image/png", size)] if vision else [])


def test_read_file_says_what_is_wrong(session: Session, workspace: Path) -> None:
    lines_file(workspace / "notes.txt", 3)
    (workspace / "src").mkdir()
    assert refused(session, "read_file", path="note.txt") == 'no such file: note.txt (did you mean "notes.txt"?)'
    assert refused(session, "read_file", path="gone/x.txt") == (
        f"no such file: gone/x.txt (the folder {workspace / 'gone'} does not exist either)")
    assert refused(session, "read_file", path="src") == "src is a folder, not a file; list it with list_files"
    assert refused(session, "read_file", path="notes.txt", offset=9) == (
        "offset 9 is past the end of notes.txt, which has 3 lines; use an offset from 1 to 3")
    assert refused(session, "read_file", path="notes.txt", files=[{"path": "x"}]) == "give either path or files, not both"
    assert refused(session, "read_file") == 'read_file needs "path" (one file) or "files" (several files or ranges)'
    assert "must be >= 1" in refused(session, "read_file", path="notes.txt", limit=0)


def test_read_file_reads_several_files_and_ranges(session: Session, workspace: Path) -> None:
    lines_file(workspace / "a.txt", 3)
    lines_file(workspace / "b.txt", 10)
    output = ok(session, "read_file", files=[{"path": "a.txt"}, {"path": "b.txt", "offset": 9},
                                             {"path": "missing.txt"}, {"path": "b.txt", "limit": 1}])
    assert output == ("==> a.txt <==\n     1\tline 1\n     2\tline 2\n     3\tline 3\n\n"
                      "==> b.txt <==\n     9\tline 9\n    10\tline 10\n\n"
                      "==> missing.txt <==\nno such file: missing.txt\n\n"
                      "==> b.txt <==\n     1\tline 1\n[lines 1-1 of 10 shown; read on with offset 2]")
    assert refused(session, "read_file", files=[{"path": "x.txt"}, {"path": "y.txt"}]).count("no such file") == 2


def test_read_file_shares_the_byte_cap_between_files(session: Session, workspace: Path) -> None:
    lines_file(workspace / "wide.txt", 400, width=1000)
    lines_file(workspace / "small.txt", 1)
    output = ok(session, "read_file", files=[{"path": "wide.txt"}, {"path": "small.txt"}])
    assert output.endswith("==> small.txt <==\nnot shown: the files before it filled the 256 KiB cap of one read; "
                           "read it in another call")


def test_a_reread_of_an_unchanged_slice_is_a_stub(session: Session, workspace: Path) -> None:
    lines_file(workspace / "a.txt", 5)
    ok(session, "read_file", path="a.txt")
    at = session.state.read_state[str(workspace / "a.txt")].at
    stub = f"./a.txt: unchanged since your read at {at}; what that read showed is still current"
    assert ok(session, "read_file", path="./a.txt") == stub
    # Another slice, or other line numbering, is shown in full.
    assert ok(session, "read_file", path="a.txt", limit=2).startswith("     1\tline 1")
    assert ok(session, "read_file", path="a.txt", limit=2, line_numbers=False).startswith("line 1\n")
    # A change from outside, and a write of ours (the entry is elided), are shown in full too.
    (workspace / "a.txt").write_text("new\n")
    assert ok(session, "read_file", path="a.txt") == "     1\tnew"
    ok(session, "edit", path="a.txt", old_string="new", new_string="newer")
    assert session.state.read_state[str(workspace / "a.txt")].elided
    assert ok(session, "read_file", path="a.txt") == "     1\tnewer"
    assert "unchanged since" in ok(session, "read_file", path="a.txt")


# -- write_file ---------------------------------------------------------------------------


def test_write_file_creates_updates_and_says_no_change(session: Session, workspace: Path) -> None:
    assert ok(session, "write_file", path="deep/er/new.txt", content="héllo\n") == "Created deep/er/new.txt (7 bytes)"
    assert (workspace / "deep/er/new.txt").read_text() == "héllo\n"
    assert ok(session, "write_file", path="deep/er/new.txt", content="héllo\n") == (
        "No change needed: deep/er/new.txt already at target state (7 bytes)")
    assert ok(session, "write_file", path="deep/er/new.txt", content="bye\n") == "Updated deep/er/new.txt (4 bytes)"
    assert (workspace / "deep/er/new.txt").read_text() == "bye\n"
    assert not [p for p in (workspace / "deep/er").iterdir() if p.name != "new.txt"]  # no temporary file left


def test_write_file_of_an_existing_file_needs_a_read(session: Session, workspace: Path) -> None:
    (workspace / "old.txt").write_text("old\n")
    assert refused(session, "write_file", path="old.txt", content="new\n") == (
        "old.txt has not been read in this session; read it with read_file first, so the change is made to what "
        "is really there")
    assert (workspace / "old.txt").read_text() == "old\n"
    ok(session, "read_file", path="old.txt")
    assert ok(session, "write_file", path="old.txt", content="new\n") == "Updated old.txt (4 bytes)"


def test_write_file_keeps_the_mode_and_writes_through_a_symlink(session: Session, workspace: Path) -> None:
    script = workspace / "run.sh"
    script.write_text("echo 1\n")
    script.chmod(0o751)
    (workspace / "link.sh").symlink_to("run.sh")
    ok(session, "read_file", path="link.sh")
    ok(session, "write_file", path="link.sh", content="echo 2\n")
    assert (workspace / "link.sh").is_symlink()
    assert script.read_text() == "echo 2\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o751


def test_write_file_into_a_folder_path_is_refused(session: Session, workspace: Path) -> None:
    (workspace / "dir").mkdir()
    assert refused(session, "write_file", path="dir", content="x") == "dir is a folder, not a file; list it with list_files"


# -- edit ---------------------------------------------------------------------------------


CODE = "def f():\n    return 1\n\n\ndef g():\n    return 1\n"


@pytest.fixture
def code(session: Session, workspace: Path) -> Path:
    path = workspace / "code.py"
    path.write_text(CODE)
    ok(session, "read_file", path="code.py")
    return path


def test_edit_replaces_one_unique_string(session: Session, code: Path) -> None:
    assert ok(session, "edit", path="code.py", old_string="def g():\n    return 1",
              new_string="def g():\n    return 2") == "Edited code.py: 1 replacement"
    assert code.read_text() == CODE.replace("def g():\n    return 1", "def g():\n    return 2")


def test_edit_says_how_many_and_where_when_not_unique(session: Session, code: Path) -> None:
    assert refused(session, "edit", path="code.py", old_string="return 1", new_string="return 2") == (
        "old_string occurs 2 times in code.py (at lines 2, 6); include more of the surrounding text to make it "
        "unique, or set replace_all to replace every occurrence")
    assert ok(session, "edit", path="code.py", old_string="return 1", new_string="return 2",
              replace_all=True) == "Edited code.py: 2 replacements"
    assert code.read_text() == CODE.replace("return 1", "return 2")


def test_edit_not_found_shows_the_nearest_lines(session: Session, code: Path) -> None:
    assert refused(session, "edit", path="code.py", old_string="def  g():\n  return 1", new_string="x") == (
        "old_string not found in code.py. The closest text is at line 5:\n"
        "     5\tdef g():\n     6\t    return 1\n"
        "Check whitespace, indentation and line endings, and copy old_string from there.")
    assert refused(session, "edit", path="code.py", old_string="class Zebra:", new_string="x") == (
        "old_string not found in code.py. No line resembles its first line; read the file to see what it holds.")
    assert code.read_text() == CODE


def test_edit_refuses_what_cannot_change_anything(session: Session, code: Path, workspace: Path) -> None:
    assert refused(session, "edit", path="code.py", old_string="f", new_string="f") == (
        "old_string and new_string are identical; there is nothing to change")
    assert refused(session, "edit", path="code.py", old_string="", new_string="x") == (
        "old_string is empty; give the text to replace (to write a whole file, use write_file)")
    assert refused(session, "edit", path="zzzz.txt", old_string="a", new_string="b") == (
        "no such file: zzzz.txt; to create a file, use write_file")
    (workspace / "bin.dat").write_bytes(b"a\x00b")
    ok(session, "read_file", path="bin.dat")
    assert refused(session, "edit", path="bin.dat", old_string="a", new_string="b") == (
        "bin.dat is a binary file (3 bytes); edits work on text files")
    (workspace / "odd.txt").write_bytes(b"abc \xff def" + b" plain text" * 10)
    ok(session, "read_file", path="odd.txt")
    assert refused(session, "edit", path="odd.txt", old_string="abc", new_string="x") == (
        "odd.txt is not UTF-8 text (byte 4 cannot be decoded); edits work on UTF-8 text files")


def test_edit_keeps_crlf_line_endings(session: Session, workspace: Path) -> None:
    (workspace / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    ok(session, "read_file", path="win.txt")
    ok(session, "edit", path="win.txt", old_string="two", new_string="2")
    assert (workspace / "win.txt").read_bytes() == b"one\r\n2\r\n"


_TEXT = st.text(alphabet=st.sampled_from("ab\n é\t"), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=_TEXT, old=_TEXT.filter(bool), new=_TEXT, after=_TEXT)
def test_edit_is_str_replace_where_the_match_is_unique(session: Session, workspace: Path, before: str, old: str,
                                                       new: str, after: str) -> None:
    text = before + old + after
    path = workspace / "h.txt"
    path.write_bytes(text.encode())
    ok(session, "read_file", path="h.txt")
    result = session.call("edit", {"path": "h.txt", "old_string": old, "new_string": new})
    if text.count(old) == 1 and old != new:
        assert not result.is_error, result.output
        assert path.read_bytes().decode() == text.replace(old, new)
    else:
        assert result.is_error
        assert path.read_bytes().decode() == text


# -- multi_edit ---------------------------------------------------------------------------


def test_multi_edit_applies_in_order(session: Session, code: Path) -> None:
    assert ok(session, "multi_edit", path="code.py", edits=[
        {"old_string": "def f", "new_string": "def first"},
        {"old_string": "def first():\n    return 1", "new_string": "def first():\n    return 0"},
        {"old_string": "return 1", "new_string": "return 9", "replace_all": True},
    ]) == "Edited code.py: applied 3 of 3 edits (3 replacements)."
    assert code.read_text() == "def first():\n    return 0\n\n\ndef g():\n    return 9\n"


def test_multi_edit_reports_each_hunk(session: Session, code: Path) -> None:
    assert ok(session, "multi_edit", path="code.py", edits=[
        {"old_string": "def f", "new_string": "def first"},
        {"old_string": "return 1", "new_string": "return 2"},
        {"old_string": "g", "new_string": "g"},
        {"old_string": "def g", "new_string": "def second"},
    ]) == ("Edited code.py: applied 2 of 4 edits (2 replacements).\n"
           "edit #2 failed: old_string occurs 2 times in code.py (at lines 2, 6); include more of the surrounding "
           "text to make it unique, or set replace_all to replace every occurrence\n"
           "edit #3 failed: old_string and new_string are identical; there is nothing to change\n"
           "<edit_outcomes>\n#1 applied\n#2 failed: old_string occurs 2 times in code.py (at lines 2, 6)\n"
           "#3 failed: old_string and new_string are identical\n#4 applied\n</edit_outcomes>")
    assert code.read_text() == "def first():\n    return 1\n\n\ndef second():\n    return 1\n"


def test_multi_edit_writes_nothing_when_no_hunk_applies(session: Session, code: Path) -> None:
    before = code.stat().st_mtime_ns
    assert refused(session, "multi_edit", path="code.py", edits=[{"old_string": "zebra", "new_string": "x"}]) == (
        "No change to code.py: applied 0 of 1 edits.\n"
        "edit #1 failed: old_string not found in code.py. No line resembles its first line; read the file to see "
        "what it holds.\n<edit_outcomes>\n#1 failed: old_string not found in code.py\n</edit_outcomes>")
    assert code.stat().st_mtime_ns == before
    assert not session.state.read_state[str(code)].elided  # nothing was written


# -- paths and confinement ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["with space.txt", "ünïcödé 文件.txt", "sub dir/x y.txt"])
def test_paths_with_spaces_and_unicode(session: Session, workspace: Path, name: str) -> None:
    assert ok(session, "write_file", path=name, content="one\n").startswith("Created ")
    ok(session, "read_file", path=name)
    assert ok(session, "edit", path=name, old_string="one", new_string="two") == f"Edited {name}: 1 replacement"
    assert (workspace / name).read_text() == "two\n"


def test_relative_dotted_and_absolute_paths_are_one_file(session: Session, workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src/a.py").write_text("a = 1\n")
    ok(session, "read_file", path="src/a.py")
    ok(session, "edit", path="./src/a.py", old_string="a = 1", new_string="a = 2")
    ok(session, "edit", path=str(workspace / "src/../src/a.py"), old_string="a = 2", new_string="a = 3")
    assert list(session.state.read_state) == [str(workspace / "src/a.py")]


def test_a_symlink_is_its_own_key(session: Session, workspace: Path) -> None:
    # As the seed says: the file is the path the model addressed, not the real path behind it.
    (workspace / "real.txt").write_text("x\n")
    (workspace / "alias.txt").symlink_to("real.txt")
    ok(session, "read_file", path="alias.txt")
    ok(session, "edit", path="alias.txt", old_string="x", new_string="y")
    assert "has not been read" in refused(session, "edit", path="real.txt", old_string="y", new_string="z")


def test_parent_paths_outside_the_workspace(home_dir: Path, journal: SQLiteJournal, workspace: Path) -> None:
    outside = workspace.parent / "outside.txt"
    outside.write_text("out\n")
    (workspace / "escape").symlink_to(outside)
    with make_session(home_dir, journal, workspace) as free:
        assert ok(free, "read_file", path="../outside.txt") == "     1\tout"
        assert ok(free, "edit", path=str(outside), old_string="out", new_string="in") == (
            f"Edited {outside}: 1 replacement")
        assert ok(free, "read_file", path="escape") == "     1\tin"
    with make_session(home_dir, journal, workspace, confine_to_workspace=True) as confined:
        root = workspace.resolve()
        for path in ["../outside.txt", str(outside), "escape"]:
            message = (f"{path} is outside the workspace ({root}), and builtins.confine_to_workspace is on in "
                       "config.json; use a path inside the workspace")
            assert refused(confined, "read_file", path=path) == message
            assert refused(confined, "write_file", path=path, content="x") == message
            assert refused(confined, "edit", path=path, old_string="in", new_string="x") == message
            assert refused(confined, "multi_edit", path=path, edits=[{"old_string": "in", "new_string": "x"}]) == message
        assert ok(confined, "write_file", path="inside/../ok.txt", content="fine\n") == "Created inside/../ok.txt (5 bytes)"
    assert outside.read_text() == "in\n"


#: Swaps, as fast as it can, a folder of the workspace with a link to a folder outside it, and a file with a
#: link to a file outside: renameat2(RENAME_EXCHANGE), so each name is always one or the other, never absent.
_RACER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
def swap(a, b):
    if libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), a)
os.chdir(sys.argv[1])
swap("d", "d.other"); swap("d", "d.other")
print("racing", flush=True)
while True:
    swap("d", "d.other")
    swap("f.txt", "f.other")
"""


def test_a_process_swapping_folders_and_links_never_gets_a_file_tool_outside_a_confined_workspace(
        home_dir: Path, journal: SQLiteJournal, tmp_path: Path) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    (workspace / "d").mkdir(parents=True)
    outside.mkdir()
    for name in ("secret.txt", "f.txt", "only-outside.txt"):
        (outside / name).write_text("SECRET inside\n")  # what an edit or a read that got out would touch
    (workspace / "d" / "secret.txt").write_text("inside\n")
    (workspace / "f.txt").write_text("inside\n")
    (workspace / "d.other").symlink_to(outside)
    (workspace / "f.other").symlink_to(outside / "f.txt")
    racer = subprocess.Popen([sys.executable, "-c", _RACER, str(workspace)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert racer.stdout is not None
    if racer.stdout.readline() != "racing\n":
        racer.wait()
        pytest.skip(f"renameat2(RENAME_EXCHANGE) is not available here: {racer.stderr.read()}")
    outcomes: dict[str, int] = {}
    try:
        with make_session(home_dir, journal, workspace, confine_to_workspace=True,
                          require_read_before_edit=False) as confined:
            for n in range(40):
                for tool, arguments in [
                        ("write_file", {"path": "d/new.txt", "content": f"write {n}\n"}),
                        ("write_file", {"path": "f.txt", "content": f"inside {n}\n"}),
                        ("edit", {"path": "d/secret.txt", "old_string": "inside", "new_string": "within"}),
                        ("edit", {"path": "d/secret.txt", "old_string": "within", "new_string": "inside"}),
                        ("read_file", {"path": "d/secret.txt"}), ("read_file", {"path": "f.txt"}),
                        ("grep", {"pattern": "SECRET", "path": "d"}), ("grep", {"pattern": "SECRET"}),
                        ("glob", {"pattern": "d/*", "metadata": False}), ("list_files", {"path": "d"})]:
                    result = confined.call(tool, arguments)
                    assert "SECRET" not in result.output and "only-outside" not in result.output, (
                        tool, arguments, result.output)
                    kind = "refused" if "outside the workspace" in result.output else (
                        "error" if result.is_error else "done")
                    outcomes[f"{tool} {kind}"] = outcomes.get(f"{tool} {kind}", 0) + 1
    finally:
        racer.kill()
        racer.wait()
    assert sorted(os.listdir(outside)) == ["f.txt", "only-outside.txt", "secret.txt"], outcomes  # none written
    assert {(outside / name).read_text() for name in os.listdir(outside)} == {"SECRET inside\n"}, outcomes
    # The race was run: some calls met the links (and were refused), some the folder and the file.
    assert outcomes.get("write_file refused") and outcomes.get("write_file done"), outcomes


def test_the_gate_can_be_turned_off(home_dir: Path, journal: SQLiteJournal, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a\n")
    with make_session(home_dir, journal, workspace, require_read_before_edit=False) as loose:
        assert ok(loose, "edit", path="a.txt", old_string="a", new_string="b") == "Edited a.txt: 1 replacement"
        assert ok(loose, "write_file", path="a.txt", content="c\n") == "Updated a.txt (2 bytes)"


# -- how they are scheduled and journaled -------------------------------------------------


def test_reads_run_in_fleets_and_writes_are_barriers() -> None:
    tools = registry.all_builtins()
    assert (tools["read_file"].is_concurrency_safe({"path": "a"}), tools["read_file"].replay) == (True, "safe")
    for name in ("write_file", "edit", "multi_edit"):
        assert (tools[name].is_concurrency_safe({"path": "a"}), tools[name].replay) == (False, "unsafe")
    assert list(tools)[:4] == ["read_file", "write_file", "edit", "multi_edit"]


def test_what_the_model_saw_is_journaled_with_the_result(session: Session, engine: Engine, workspace: Path) -> None:
    data = b"hash me\n"
    (workspace / "h.txt").write_bytes(data)
    ok(session, "read_file", path="h.txt", offset=1, limit=5)
    events = [s.event for s in engine.journal.read(session.session_id)]
    kinds = [e.type for e in events]
    updated = events[kinds.index("read_state_updated")]
    assert kinds.index("read_state_updated") == kinds.index("tool_call_finished") - 1
    (entry,) = updated.entries
    assert (entry.path, entry.hash, entry.offset, entry.limit, entry.line_numbers, entry.elided) == (
        str(workspace / "h.txt"), files.content_hash(data), 1, 5, True, False)
    assert entry.hash.startswith("xxh3:") and len(entry.hash) == 21  # 64 bits, in hex


def place_of(path: Path) -> beneath.Place:
    """Where ``path`` is, as the file built-ins reach it (from /: no confinement)."""
    folder, name = beneath.locate("/", False, str(path))
    return beneath.Place(path, folder, name)


def test_atomic_write_leaves_no_temporary_file_on_failure(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()  # the rename over a folder fails after the temporary file is written
    with pytest.raises(IsADirectoryError), place_of(tmp_path / "dir") as where:
        files.write_atomic(where, b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]


def test_a_write_removes_what_a_killed_write_left_and_nothing_else(tmp_path: Path) -> None:
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    orphan = tmp_path / f".f.txt.{dead}.abc_1234{files._TEMPORARY}"
    ours = tmp_path / f".f.txt.{os.getpid()}.abc_1234{files._TEMPORARY}"  # a write still running
    other = tmp_path / f".g.txt.{dead}.abc_1234{files._TEMPORARY}"  # another file's
    # The write of f.txt.<dead> still running (its writer, us, is alive): ".f.txt." plus digits, like a pid.
    longer = tmp_path / f".f.txt.{dead}.{os.getpid()}.abc_1234{files._TEMPORARY}"
    for path in (orphan, ours, other, longer):
        path.write_text("half")
    with place_of(tmp_path / "f.txt") as where:
        files.write_atomic(where, b"whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["f.txt", ours.name, other.name, longer.name])


#: A call of each tool that changes a file holding "old\n".
_CHANGES: list[tuple[str, dict[str, Any]]] = [
    ("write_file", {"content": "new\n"}), ("edit", {"old_string": "old", "new_string": "x"}),
    ("multi_edit", {"edits": [{"old_string": "old", "new_string": "x"}]})]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another owner")
def test_a_write_keeps_the_owner(session: Session, workspace: Path) -> None:
    for tool, arguments in _CHANGES:
        path = workspace / f"{tool}.txt"
        path.write_text("old\n")
        os.chown(path, 1000, 1000)
        ok(session, "read_file", path=path.name)
        ok(session, tool, path=path.name, **arguments)
        assert (path.stat().st_uid, path.stat().st_gid, path.read_text() != "old\n") == (1000, 1000, True)


def test_a_read_only_file_is_not_replaced(session: Session, workspace: Path) -> None:
    for tool, arguments in _CHANGES:
        path = workspace / f"my {tool}.txt"
        path.write_text("old\n")
        path.chmod(0o444)
        ok(session, "read_file", path=path.name)
        assert refused(session, tool, path=path.name, **arguments) == (
            f"my {tool}.txt is read-only (mode 444); it was not changed. If it should change, make it writable "
            f"first (e.g. shell: chmod u+w 'my {tool}.txt')")
        assert (path.read_text(), stat.S_IMODE(path.stat().st_mode)) == ("old\n", 0o444)


# -- what is not a small regular file -----------------------------------------------------

#: Runs the calls given as JSON in a session of its own, its address space capped a little above what it uses
#: once loaded, and prints each result: a FIFO that hangs, or a file read whole, fails it instead of the suite.
_CHILD = """
import json, resource, sys
from pathlib import Path
from zagent_core import Engine, Home
from zagent_core.config import Config
from zagent_store import SQLiteJournal
home, workspace, calls = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
with Engine(Home(home), SQLiteJournal(home / "journal.db"), workspace=workspace, config=Config()).start_session() as s:
    size = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + 256 * 2**20, resource.RLIM_INFINITY))
    for tool, arguments in calls:
        result = s.call(tool, arguments)
        print(json.dumps([result.output, result.is_error]), flush=True)
"""


def in_child(home: Path, workspace: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, bool]]:
    done = subprocess.run([sys.executable, "-c", _CHILD, str(home), str(workspace), json.dumps(calls)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [tuple(json.loads(line)) for line in done.stdout.splitlines()]  # type: ignore[misc]


def test_a_fifo_or_a_device_is_refused_not_waited_on(home_dir: Path, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    (workspace / "pipe.txt").symlink_to("pipe")
    not_regular = ("the file tools only work on regular files (look at it with shell if you must, e.g. head -c "
                   "1000)")
    calls = [("read_file", {"path": "pipe"}), ("read_file", {"path": "pipe.txt"}), ("read_file", {"path": "/dev/zero"}),
             ("write_file", {"path": "pipe", "content": "x"}),
             ("edit", {"path": "pipe", "old_string": "a", "new_string": "b"}),
             ("multi_edit", {"path": "/dev/zero", "edits": [{"old_string": "a", "new_string": "b"}]}),
             ("grep", {"pattern": "a", "path": "pipe"}), ("grep", {"pattern": "a", "path": "/dev/zero"})]
    assert in_child(home_dir, workspace, calls) == [
        (f"pipe is a named pipe (FIFO), not a regular file; {not_regular}", True),
        (f"pipe.txt is a named pipe (FIFO), not a regular file; {not_regular}", True),
        (f"/dev/zero is a character device, not a regular file; {not_regular}", True),
        (f"pipe is a named pipe (FIFO), not a regular file; {not_regular}", True),
        (f"pipe is a named pipe (FIFO), not a regular file; {not_regular}", True),
        (f"/dev/zero is a character device, not a regular file; {not_regular}", True),
        (f"pipe is a named pipe (FIFO), not a regular file; {not_regular}", True),
        (f"/dev/zero is a character device, not a regular file; {not_regular}", True),
    ]
    assert stat.S_ISFIFO(os.lstat(workspace / "pipe").st_mode)  # not replaced by a regular file


def test_a_huge_file_is_never_read_whole(home_dir: Path, workspace: Path) -> None:
    head = "".join(f"line {n}\n" for n in range(1, 2001)).encode()
    with open(workspace / "huge.log", "wb") as handle:
        handle.write(head)
        handle.truncate(600 * 2**20)  # sparse: 600 MiB on paper, more than the child may hold
    results = in_child(home_dir, workspace, [
        ("read_file", {"path": "huge.log", "offset": 3, "limit": 2}),
        ("edit", {"path": "huge.log", "old_string": "line 1\n", "new_string": "line one\n"}),
        ("write_file", {"path": "huge.log", "content": "small\n"})])
    assert results[0] == ("     3\tline 3\n     4\tline 4\n[lines 3-4 of a 600.0 MiB file shown; read on with offset 5]",
                          False)
    too_large = ("huge.log is 600 MiB, more than the 64 MiB the edit tools load whole; look at it with read_file "
                 "(offset/limit) or grep, and change it with shell (e.g. sed -i)")
    assert results[1:] == [(too_large, True), (too_large, True)]
    assert (workspace / "huge.log").stat().st_size == 600 * 2**20


def test_a_read_cut_by_the_byte_cap_is_not_answered_with_the_stub(session: Session, workspace: Path) -> None:
    lines_file(workspace / "a.txt", 1000, width=200)  # about 200 KB
    lines_file(workspace / "b.txt", 1000, width=100)  # about 100 KB: cut by the cap the two reads share
    both = ok(session, "read_file", files=[{"path": "a.txt"}, {"path": "b.txt"}])
    assert "(the 256 KiB cap of one read was reached)" in both
    alone = ok(session, "read_file", path="b.txt")
    assert "unchanged since" not in alone and alone.endswith("  1000\tline 1000" + "x" * 100)
    assert "unchanged since" in ok(session, "read_file", path="b.txt")


def test_read_file_offset_and_limit_have_a_maximum(session: Session, workspace: Path) -> None:
    lines_file(workspace / "a.txt", 3)
    for name in ("offset", "limit"):
        output = refused(session, "read_file", path="a.txt", **{name: 10**30})
        assert "must be <= 2147483647" in output and "zagent failed" not in output, output


def test_the_gate_says_how_to_edit_under_tools_run(home_dir: Path, journal: SQLiteJournal, workspace: Path) -> None:
    (workspace / "a.txt").write_text("a\n")
    hint = " (each zagent tools run is a new session: to change files there, set builtins.require_read_before_edit " \
           "to false in config.json)"
    for origin, expected in [("tools run", hint), ("api", "")]:
        with Engine(Home(home_dir), journal, workspace=workspace).start_session(origin) as live:
            assert refused(live, "edit", path="a.txt", old_string="a", new_string="b") == (
                "a.txt has not been read in this session; read it with read_file first, so the change is made to "
                f"what is really there{expected}")
