"""``zagent tools list`` keeps its listing in the home's cache and serves the next one from it,
loading neither pydantic nor the engine, until any file it came from changes; a cache that
cannot be read is passed over and written again. Real processes, the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import PYTHON, python_tool

from zagent_cli.main import cli

#: Files this old have settled: a listing made of them is kept.
_SETTLED = 60


def _settle(home: Path) -> None:
    """Date every file of the home (and the home) a minute back, as a home written earlier is."""
    then = time.time() - _SETTLED
    for path in [home, *home.rglob("*")]:
        os.utime(path, (then, then), follow_symlinks=False)


def _cache(home: Path) -> Path:
    """This installation's cache file in ``home``."""
    from zagent_cli.tools_cache import _NAME

    return home / "cache" / _NAME


def _listed(home: Path, *args: str) -> str:
    shown = CliRunner().invoke(cli, ["--home", str(home), "tools", "list", *args])
    assert shown.exit_code == 0, shown.output
    return shown.output


def _fresh(home: Path) -> str:
    """The listing made from the files, the cache put aside."""
    cache = _cache(home)
    kept = cache.read_bytes() if cache.exists() else None
    cache.unlink(missing_ok=True)
    try:
        return _listed(home, "--json")
    finally:
        if kept is not None:
            cache.write_bytes(kept)


@pytest.fixture
def home(home_dir: Path) -> Path:
    python_tool(home_dir, "alpha", "print('a')", description="First tool. It says a.")
    python_tool(home_dir, "beta", "print('b')", description="Second tool.")
    _settle(home_dir)
    return home_dir


@pytest.mark.parametrize("via_link", [False, True], ids=["python", "python through a link"])
def test_the_next_listing_comes_from_the_cache_without_loading_the_models(home: Path, tmp_path: Path,
                                                                         via_link: bool) -> None:
    first = _listed(home)
    assert _cache(home).exists()
    python = PYTHON
    if via_link:  # another path to the same interpreter (python, python3.11) lists the same tools
        python = str(tmp_path / "python-link")
        os.symlink(PYTHON, python)
    code = ("import sys\nfrom zagent_cli.main import cli\ntry:\n"
            f"    cli(['--home', {str(home)!r}, 'tools', 'list'])\nexcept SystemExit:\n    pass\n"
            "print('loaded:', *(m for m in ('pydantic', 'zagent_core.config', 'zagent_core.tools.manifest', "
            "'zagent_core.journal.events', 'structlog') if m in sys.modules))")
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    listing, _, loaded = done.stdout.rpartition("loaded:")
    assert loaded.split() == [] and listing == first
    assert "alpha  First tool. It says a.  [tools/alpha]" in first and "read_file" in first
    assert _listed(home, "--json") == _fresh(home)


def _edit_description(home: Path) -> None:
    manifest = home / "tools" / "alpha" / "alpha.json"
    manifest.write_text(manifest.read_text().replace("First tool.", "Fresh tool."))  # the same size


def _add_folder(home: Path) -> None:
    python_tool(home, "gamma", "print('c')")


def _remove_folder(home: Path) -> None:
    shutil.rmtree(home / "tools" / "beta")


def _disable(home: Path) -> None:
    (home / "config.json").write_text(json.dumps({"tools": {"disabled": ["beta"]}}))


def _break_program(home: Path) -> None:
    manifest = home / "tools" / "beta" / "beta.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"command": ["no-such-program-here"]}))


def _delete_program(home: Path) -> None:
    program = home / "bin" / "alpha-program"  # outside the tools folder: only its own signature tells
    program.parent.mkdir()
    program.write_text("#!/bin/sh\necho a\n")
    program.chmod(0o755)
    manifest = home / "tools" / "alpha" / "alpha.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"command": [str(program)]}))
    _settle(home)
    assert "alpha" in _listed(home) and _cache(home).exists()
    program.unlink()


@pytest.mark.parametrize("change", [_edit_description, _add_folder, _remove_folder, _disable, _break_program,
                                    _delete_program])
def test_any_change_to_what_it_lists_from_is_listed(home: Path, change: Callable[[Path], None]) -> None:
    before = _listed(home, "--json")
    change(home)
    after = _listed(home, "--json")
    assert after != before and after == _fresh(home)
    _settle(home)  # settled files: the new listing is kept, and served
    assert _listed(home, "--json") == after == _fresh(home)


def test_a_listing_of_files_just_written_is_not_kept(home_dir: Path) -> None:
    python_tool(home_dir, "alpha", "print('a')")
    _listed(home_dir)
    assert not _cache(home_dir).exists()


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"[]", b'{"format": 1}', b'{"format": 1, "home": 3}',
                                     b"\xff\xfe"])
def test_a_cache_that_cannot_be_read_is_passed_over_and_written_again(home: Path, garbage: bytes) -> None:
    right = _fresh(home)
    cache = _cache(home)
    cache.parent.mkdir(exist_ok=True)
    cache.write_bytes(garbage)
    assert _listed(home, "--json") == right
    assert json.loads(cache.read_bytes())["listing"] == json.loads(right)
