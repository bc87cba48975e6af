"""The house stays a house: wings with few top-level modules, and no part too big to read.

The layers themselves (a wing imports only the wings below it, no circles) are import-linter's
contracts in pyproject.toml, run by .ci/run; these are the bounds it cannot check.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(path for package in ("zagent_core", "zagent_store", "zagent_cli")
                 for path in (ROOT / package).rglob("*.py"))

WINGS = {"journal", "tools", "builtins", "session", "agent", "history", "drive"}
TOP_LEVEL = {"__init__", "config", "errors", "home", "ids", "logs", "problems", "version"}


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_zagent_core_is_its_wings_and_a_few_top_level_modules() -> None:
    core = ROOT / "zagent_core"
    assert {p.name for p in core.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == WINGS
    assert {p.stem for p in core.glob("*.py")} == TOP_LEVEL


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_module_is_over_800_lines_nor_a_class_over_300(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 800
    classes = [node for node in ast.walk(ast.parse(text)) if isinstance(node, ast.ClassDef)]
    assert [(c.name, c.end_lineno - c.lineno + 1) for c in classes if c.end_lineno - c.lineno + 1 > 300] == []


def test_the_cli_main_module_holds_only_the_group_and_its_options() -> None:
    assert len((ROOT / "zagent_cli" / "main.py").read_text(encoding="utf-8").splitlines()) <= 400
