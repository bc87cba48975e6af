"""Homes that cannot be used as given: a file, a folder under a file, read-only, a full disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import forked
from conftest import python_tool


def zagent(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "zagent_cli", "--home", str(home), *args], stdin=subprocess.DEVNULL,
                      capture_output=True, text=True)


@pytest.mark.parametrize("below", ["", "sub"])
@pytest.mark.parametrize("command", [["tools", "list"], ["tools", "run", "x"], ["sessions", "list"], ["audit"],
                                     ["run", "--model", "scripted:x.json", "hi"]])
def test_a_home_that_is_a_file_is_a_usage_error_that_says_so(tmp_path: Path, below: str, command: list[str]) -> None:
    file = tmp_path / "home"
    file.write_text("")
    done = zagent(file / below if below else file, *command)
    assert done.returncode == 2, done.stderr
    assert f"{file} is a file, not a folder" in done.stderr and "Errno" not in done.stderr
    assert "Traceback" not in done.stderr


def test_doctor_reports_a_home_that_is_a_file_as_a_problem(tmp_path: Path) -> None:
    file = tmp_path / "home"
    file.write_text("")
    done = zagent(file, "doctor")
    assert done.returncode == 1
    assert f"home: the home {file} is a file, not a folder" in done.stdout and "all good" not in done.stdout
    report = json.loads(zagent(file, "doctor", "--json").stdout)
    assert report["ok"] is False and report["problems"][0]["source"] == "home"


@pytest.fixture
def read_only_home(tmp_path: Path) -> Iterator[Path]:
    """A home with one session in its journal, then made read-only for real (a read-only
    bind mount when root, whom permissions do not stop; the permissions otherwise)."""
    home = tmp_path / "home"
    python_tool(home, "hello", "print('hello')")
    assert zagent(home, "tools", "run", "hello").returncode == 0
    if os.geteuid() == 0:
        view = tmp_path / "read-only"
        view.mkdir()
        mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(home), str(view)], capture_output=True)
        if mounted.returncode != 0:
            pytest.skip(f"cannot make a read-only mount: {mounted.stderr.decode().strip()}")
        try:
            yield view
        finally:
            subprocess.run(["umount", str(view)], check=True)
        return
    paths = [home, *home.rglob("*")]
    modes = {path: path.stat().st_mode for path in paths}
    for path in paths:
        path.chmod(modes[path] & ~0o222)
    try:
        yield home
    finally:
        for path in reversed(paths):
            path.chmod(modes[path])


def test_doctor_says_nothing_can_run_in_a_read_only_home(read_only_home: Path) -> None:
    assert "hello" in zagent(read_only_home, "tools", "list").stdout
    report = json.loads(zagent(read_only_home, "doctor", "--json").stdout)
    (home_problem,) = [p for p in report["problems"] if p["source"] == "home"]
    assert home_problem["severity"] == "warning" and "is read-only: nothing can run here" in home_problem["message"]


@pytest.mark.parametrize("command", [["sessions", "list"], ["sessions", "show"], ["audit"], ["doctor"]])
def test_read_only_commands_work_on_a_read_only_home(read_only_home: Path, command: list[str]) -> None:
    done = zagent(read_only_home, *command)
    assert done.returncode == 0 and "Error" not in done.stderr, done.stderr


def test_a_full_disk_is_reported_without_tracebacks(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a small filesystem needs mount (root)")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(home)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {mounted.stderr.decode().strip()}")
    try:
        # The journal fits; the 10 MB the tool prints (kept in full beside the call) does not.
        python_tool(home, "flood", "print('x' * 10_000_000)")
        done = zagent(home, "tools", "run", "flood")
    finally:
        subprocess.run(["umount", str(home)], check=True)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith("Error: ") and "disk is full" in done.stderr.splitlines()[-1]
    assert all("No space left" in line or "disk is full" in line for line in done.stderr.splitlines()), done.stderr
