"""The public face, pinned: what `__all__` offers and every path docs/python-api.md names.

A move inside the packages must not move what users import. This test lists the public
names before any move, as Temporal's SDK pinned its client split (`test_client_exports.py`),
and reads the documented paths from the page users read, so the page and the code cannot
drift apart.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import zagent_core
import zagent_store

API_PAGE = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"

CORE_NAMES = [
    "CallView", "ConcurrencyError", "Config", "Engine", "Home", "Journal", "Manifest", "Problem",
    "Session", "SessionState", "SessionSummary", "StoredEvent", "Tool", "ToolResult", "ToolSet",
    "apply", "load_config", "load_tools", "rebuild",
]
STORE_NAMES = ["MemoryJournal", "SQLiteJournal", "open_journal"]

_DOTTED = re.compile(r"`(zagent_(?:core|store|cli)(?:\.[A-Za-z_][A-Za-z0-9_]*)*)`")
_FROM_IMPORT = re.compile(r"^from (zagent_(?:core|store|cli)[A-Za-z0-9_.]*) import ([A-Za-z0-9_, ]+)$", re.MULTILINE)


def _resolve(path: str) -> object:
    """The object a dotted path names: the longest importable module, then its attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            value = getattr(value, attribute)
        return value
    raise ModuleNotFoundError(path)


def _documented_paths() -> list[str]:
    text = API_PAGE.read_text(encoding="utf-8")
    paths = set(_DOTTED.findall(text))
    for module, names in _FROM_IMPORT.findall(text):
        paths.update(f"{module}.{name.strip()}" for name in names.split(",") if name.strip())
    return sorted(paths)


def test_zagent_core_offers_exactly_its_public_names() -> None:
    assert sorted(zagent_core.__all__) == sorted(CORE_NAMES)
    for name in CORE_NAMES:
        assert getattr(zagent_core, name) is not None


def test_zagent_store_offers_exactly_its_public_names() -> None:
    assert sorted(zagent_store.__all__) == sorted(STORE_NAMES)
    for name in STORE_NAMES:
        assert getattr(zagent_store, name) is not None


def test_the_api_page_names_paths_to_check() -> None:
    # A regex that stopped matching would make the next test pass on nothing.
    assert len(_documented_paths()) > 30


@pytest.mark.parametrize("path", _documented_paths())
def test_every_path_the_api_page_names_imports(path: str) -> None:
    assert _resolve(path) is not None


@pytest.mark.parametrize("path", ["zagent_core.events", "zagent_core.rebuild", "zagent_store.SQLiteJournal"])
def test_names_used_outside_the_project_keep_their_paths(path: str) -> None:
    assert _resolve(path) is not None
