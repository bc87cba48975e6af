"""The command line type-checks: ``mypy`` (pydantic's plugin, pyproject.toml) finds nothing in ``zagent_cli``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_finds_no_error_in_the_command_line() -> None:
    # Other packages are followed (zagent_cli imports them) and may still report errors of
    # their own; this test owns the CLI's.
    done = subprocess.run([sys.executable, "-m", "mypy", "-p", "zagent_cli"], cwd=ROOT, capture_output=True,
                          text=True)
    assert "Success" in done.stdout or "Found" in done.stdout, done.stdout + done.stderr  # it ran
    ours = [line for line in done.stdout.splitlines() if line.startswith("zagent_cli/")]
    assert ours == []
