"""grep's two searches agree: ripgrep and the Python fallback give the same items, in the
same order, over generated trees (nested ``.gitignore`` files with negations, folder-only
and anchored lines, hidden files, binary files, nested repositories) and generated queries."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from zagent_core.builtins import grep
from zagent_core.builtins.grep import Query, SearchError, search
from zagent_core.builtins.search import Filters

RG = Path(sys.executable).parent / "rg"
pytestmark = pytest.mark.skipif(not RG.exists(), reason="ripgrep is installed by the test extra")

# "caf\udce9.txt" is written as the bytes b"caf\xe9.txt": a name that is not UTF-8.
NAMES = ["a", "b.py", "c.txt", "d", ".h", ".e.py", "é.txt", "x y.md", "a.txt", "caf\udce9.txt"]
LINES = ["foo", "bar baz", "FOO bar", "", "x foo y", "fo", "  indented foo", "bär"]
IGNORE_LINES = ["*.py", "!b.py", "a/", "/c.txt", "d/**/c.txt", "**/d", "# comment", "*.txt", "!.e.py",
                "!a.txt", "a", "/a/b.py", "*.md", "!*.md", "x?y.md", "[ab].txt", "\\#x", "d/", "caf\udce9.txt",
                "\ufeff*.py", "b.py\r", "a\rb.py"]
PATTERNS = ["foo", "ba[rz]", "^x", "o$", "FOO", "f.o", "bär", "\\bbar\\b", "o+", "^$"]
MULTILINE_PATTERNS = ["o\\nb", "o.*?b", "^fo$", "\\n\\n", "y\\n.*foo", "o\\n", "a.z", "^$", "\\n", "o\\n$"]
GLOBS = ["*.py", "!*.py", "*.txt", "**/*.{py,txt}", "d/**", "*.md", "a/*"]


@st.composite
def trees(draw: st.DrawFn, depth: int = 0) -> dict[str, object]:
    """A folder: name -> file text (str), binary bytes, or a sub-folder (dict)."""
    entries: dict[str, object] = {}
    for name in draw(st.lists(st.sampled_from(NAMES), min_size=1 if depth else 3, max_size=6, unique=True)):
        kind = draw(st.sampled_from(["file", "file", "file", "binary", "folder"] if depth < 3 else ["file"]))
        if kind == "folder":
            entries[name] = draw(trees(depth + 1))
        elif kind == "binary":
            entries[name] = b"foo\x00bar\n"
        else:
            entries[name] = "\n".join(draw(st.lists(st.sampled_from(LINES), min_size=1, max_size=6))) + draw(
                st.sampled_from(["\n", ""]))
    if draw(st.booleans()):
        entries[".gitignore"] = "\n".join(draw(st.lists(st.sampled_from(IGNORE_LINES), max_size=4))) + "\n"
    if depth and draw(st.integers(0, 9)) == 0:
        entries[".git"] = {}
    return entries


def make(root: Path, tree: dict[str, object]) -> list[Path]:
    """Write ``tree`` under ``root``; returns every folder made (``root`` first)."""
    folders = [root]
    root.mkdir(exist_ok=True)
    for name, content in tree.items():
        path = root / name
        if isinstance(content, dict):
            folders += make(path, content)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:  # a lone surrogate is written as the byte it stands for: text that is not UTF-8
            path.write_bytes(str(content).encode("utf-8", "surrogateescape"))
    return folders


def both(root: str | Path, **fields: Any) -> tuple[list[object], list[object]]:
    """What ripgrep and the Python search find of the query ``fields`` ask for, in folder ``root``."""
    def collect(search: object) -> list[object]:
        try:
            return list(search)  # type: ignore[call-overload]
        except SearchError as exc:
            return [f"error: {type(exc).__name__}"]

    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY)  # the Python search reads from it, as grep opens it
    try:
        query = Query(root=str(root), root_is_file=False, folder=folder, **fields)
        return collect(search(query, str(RG), 60)), collect(search(query, None, 60))
    finally:
        os.close(folder)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), repo=st.booleans(), data=st.data())
def test_ripgrep_and_the_python_search_give_the_same_results(tree: dict[str, object], repo: bool,
                                                             data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp) / "ws"
        if repo:
            tree = {**tree, ".git": {}}
        folders = make(top, tree)
        root = data.draw(st.sampled_from([top, top, *folders]), label="root")
        mode = data.draw(st.sampled_from(["files_with_matches", "content", "count"]), label="mode")
        context = data.draw(st.integers(0, 2), label="context") if mode == "content" else 0
        query = dict(
            pattern=data.draw(st.sampled_from(PATTERNS), label="pattern"), mode=mode,
            filters=Filters(globs=tuple(data.draw(st.lists(st.sampled_from(GLOBS), max_size=1), label="glob")),
                            file_type=data.draw(st.sampled_from([None, None, "py", "txt", "md"]), label="type")),
            ignore_case=data.draw(st.booleans(), label="-i"),
            before=context, after=data.draw(st.integers(0, 2), label="after") if context else 0,
        )
        with pytest.MonkeyPatch.context() as patch:
            if data.draw(st.booleans(), label="content read again in order"):
                patch.setattr(grep, "CONTENT_BUFFER", 0)
            from_rg, from_python = both(root, **query)
        event(f"{len(from_rg) and 'some' or 'no'} results{', with .gitignore' if '.gitignore' in tree else ''}")
        assert from_rg == from_python, sorted(os.path.relpath(p, top) for p, _, _ in os.walk(top))


@pytest.mark.parametrize("gitignore", [
    "caf\udce9.txt\n*.py\n",  # ripgrep reads no line from the first that is not UTF-8 on
    "\ufeff*.py\n",  # a byte order mark is not part of the first line
    "a\rb.py\n",  # a carriage return does not end a line
    "b.py\r\n",  # but one before the line's end is dropped
])
def test_gitignore_lines_are_read_as_ripgrep_reads_them(gitignore: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp) / "ws"
        make(top, {".git": {}, ".gitignore": gitignore, "a": "foo\n", "b.py": "foo\n", "caf\udce9.txt": "foo\n"})
        from_rg, from_python = both(top, pattern="foo")
        assert from_rg == from_python


@settings(max_examples=40, deadline=None)
@given(lines=st.lists(st.sampled_from(LINES), min_size=1, max_size=8),
       pattern=st.sampled_from(MULTILINE_PATTERNS),
       mode=st.sampled_from(["files_with_matches", "content", "count"]))
def test_multiline_searches_agree(lines: list[str], pattern: str, mode: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "f.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        from_rg, from_python = both(tmp, pattern=pattern, mode=mode, multiline=True)
        event(f"{len(from_rg) and 'some' or 'no'} results")
        assert from_rg == from_python
