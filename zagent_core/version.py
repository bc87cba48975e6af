"""The version of zagent that runs (journaled on each session start and resume, sent as
the HTTP clients' User-Agent and as the MCP peer's implementation version), and how it is
installed: what an install hint for an extra says."""

from __future__ import annotations

import functools
import json
import shlex
import shutil
import sys
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path


@functools.cache
def zagent_version() -> str:
    """The installed distribution's version, or ``0+unknown`` when run from a bare checkout."""
    try:
        return version("zagent")
    except PackageNotFoundError:
        return "0+unknown"


def install_command(extra: str) -> str:
    """The command that adds the optional dependencies ``extra`` to this zagent, as a person
    types it: ``pip install 'zagent[mcp]'``, or, where zagent runs from a clone (installed
    with ``pip install -e .``, or not installed at all), ``pip install -e '.[mcp]'`` (the
    clone's path for ``.`` when the current folder is not the clone); ``pip`` is the pip of
    this interpreter (``/path/to/python -m pip`` when another comes first on PATH)."""
    clone = _clone()
    if clone is None:
        target = f"'zagent[{extra}]'"
    else:
        where = "." if Path.cwd() == clone else str(clone)
        target = f"-e {shlex.quote(f'{where}[{extra}]')}"
    return f"{_pip()} install {target}"


def _clone() -> Path | None:
    """The folder of the clone zagent runs from, if it does (an editable install, as its
    ``direct_url.json`` says, or the source tree itself on ``sys.path``)."""
    from urllib.parse import urlsplit
    from urllib.request import url2pathname  # only for a hint: not on every start's path

    try:
        recorded = distribution("zagent").read_text("direct_url.json")
    except PackageNotFoundError:
        source = Path(__file__).resolve().parents[1]
        return source if (source / "pyproject.toml").is_file() else None
    try:
        found = json.loads(recorded or "{}")
    except ValueError:
        return None
    url = found.get("url", "") if isinstance(found, dict) else ""
    editable = isinstance(found, dict) and isinstance(found.get("dir_info"), dict) and found["dir_info"].get("editable")
    return Path(url2pathname(urlsplit(url).path)) if editable and url.startswith("file://") else None


def _pip() -> str:
    """``pip`` when the first on PATH is this interpreter's, else this interpreter's ``-m pip``."""
    here = Path(sys.executable).parent
    found = shutil.which("pip")
    return "pip" if found is not None and Path(found).parent == here else f"{shlex.quote(sys.executable)} -m pip"
