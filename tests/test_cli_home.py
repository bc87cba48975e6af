"""Homes that cannot be used as given: a file, a folder under a file, read-only, a full disk."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def zagent(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zagent_cli", "--home", str(home), *args],
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
