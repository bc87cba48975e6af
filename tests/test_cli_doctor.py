"""``zagent doctor`` finds the tools that load but cannot start, and says what to change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import write_tool

from zagent_cli.main import cli


def doctor(home: Path, *args: str):
    return CliRunner().invoke(cli, ["--home", str(home), "doctor", *args], catch_exceptions=False)


def script_tool(home: Path, name: str, script: bytes, mode: int = 0o755) -> Path:
    folder = write_tool(home, name, {"description": f"script {name}", "command": ["run.sh"]})
    (folder / "run.sh").write_bytes(script)
    (folder / "run.sh").chmod(mode)
    return folder


@pytest.mark.parametrize(("script", "mode", "said"), [
    (b"#!/bin/sh\necho hi\n", 0o644,
     'cannot start: tools/t/run.sh is not executable (no run bit); run "chmod +x tools/t/run.sh"'),
    (b"#!/usr/bin/env zagent-no-such-interpreter\n", 0o755,
     'cannot start: tools/t/run.sh runs with "zagent-no-such-interpreter" (its #! line: /usr/bin/env '
     "zagent-no-such-interpreter), which is not on PATH"),
    (b"#!/no/such/sh\n", 0o755, 'cannot start: tools/t/run.sh runs with "/no/such/sh" (its #! line), which does not exist'),
    (b"#!/bin/sh\r\necho hi\r\n", 0o755, "cannot start: tools/t/run.sh has Windows line endings"),
])
def test_doctor_reports_a_tool_whose_program_cannot_start(tmp_path: Path, script: bytes, mode: int, said: str) -> None:
    home = tmp_path / "home"
    script_tool(home, "t", script, mode)
    done = doctor(home)
    assert done.exit_code == 1
    assert f"  error: tools/t: {said}" in done.output
    assert done.output.rstrip().endswith("broken: see the problems above")
    report = json.loads(doctor(home, "--json").output)
    assert not report["ok"] and report["tools"]["loaded"] == ["t"]
    # and the same tool really does not start: doctor is not guessing
    ran = CliRunner().invoke(cli, ["--home", str(home), "tools", "run", "t"], catch_exceptions=False)
    assert ran.exit_code == 1


def test_doctor_is_content_once_the_run_bit_is_set(tmp_path: Path) -> None:
    home = tmp_path / "home"
    folder = script_tool(home, "t", b"#!/bin/sh\necho hi\n", 0o644)
    assert doctor(home).exit_code == 1
    (folder / "run.sh").chmod(0o755)
    done = doctor(home)
    assert done.exit_code == 0 and done.output.rstrip().endswith("all good"), done.output
