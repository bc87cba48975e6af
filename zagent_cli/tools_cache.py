"""``zagent tools list`` from a cache, when nothing it lists from has changed.

Listing the tools means validating every manifest and the config (pydantic, and the
modules of every built-in): most of the command's time. What it lists depends on files
only, so the listing (the ``--json`` object) is kept in ``<home>/cache/tools_list-*.json``
with the signature (modification time, size, mode) of each file it came from: config.json,
the tools folder, each tool folder and its manifest, each tool's program, and zagent's own
modules that make the listing. Any of them changed, added or gone, and the cache is not
used (then written again); a listing is kept only once its files are a couple of seconds
old. A cache that cannot be read, whatever is wrong with it, is not used. Not kept: a
listing with a tool that did not load (the user is fixing it, and a program put on PATH
would not show), or with MCP servers (their tools are asked for live).

Light on purpose: a listing served from here loads neither pydantic nor the engine.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from importlib.util import find_spec
from pathlib import Path
from typing import Any

#: Changes whenever what is kept changes shape.
_FORMAT = 1
#: One file per installation of zagent (its modules are among the files compared): two sharing
#: a home (a venv and a system install) would otherwise throw each other's listing away.
_NAME = f"tools_list-{zlib.crc32(str(Path(__file__).resolve().parent).encode()):08x}.json"
#: How old the newest file must be for a listing to be kept.
_SETTLED_NS = 2_000_000_000


def _signature(path: str) -> list[int] | None:
    try:
        stat = os.stat(path)
    except OSError:  # missing (or unreachable): that too is a state to compare
        return None
    return [stat.st_mtime_ns, stat.st_size, stat.st_mode]


def _sources() -> list[str]:
    """zagent's modules that make a listing: the built-ins (their descriptions, which the
    config turns on), manifests, the config, and this command."""
    spec = find_spec("zagent_core")  # found, not imported
    if spec is None or spec.origin is None:
        return []
    core = Path(spec.origin).parent
    cli = Path(__file__).parent
    builtins = sorted(str(path) for path in (core / "builtins").glob("*.py"))
    return [*builtins, str(core / "tools" / "manifest.py"), str(core / "tools" / "skills.py"), str(core / "config.py"), str(core / "problems.py"),
            str(core / "drive" / "offers.py"), str(cli / "tools.py"), __file__]


def _inputs(root: Path, config_path: Path, tools_dir: Path) -> list[str]:
    """The files every listing comes from: the config, the tools folder, each folder in it and
    its manifest, the skills folder, each skill's folder and its SKILL.md (skills_use lists the
    skills): a folder's own signature changes when a file is added to it or taken out."""
    # Not the interpreter: one started by another path (python, python3.11) lists the same tools.
    skills_dir = root / "skills"  # Home.skills_dir, without importing the engine's modules
    paths = [str(config_path), str(tools_dir), str(skills_dir), *_sources()]
    for parent, file in ((tools_dir, "{}.json"), (skills_dir, "SKILL.md")):
        try:
            with os.scandir(parent) as entries:
                folders = sorted(entry.name for entry in entries if entry.is_dir())
        except OSError:
            folders = []
        for name in folders:
            paths += [str(parent / name), str(parent / name / file.format(name))]
    return paths


def cached_listing(root: Path, config_path: Path, tools_dir: Path) -> dict[str, Any] | None:
    """The listing kept for this home, if every file it came from is as it was then."""
    try:
        kept = json.loads((root / "cache" / _NAME).read_bytes())
        if kept["format"] != _FORMAT or kept["home"] != str(root):
            return None
        signatures: dict[str, Any] = kept["files"]
        if not set(_inputs(root, config_path, tools_dir)) <= signatures.keys():  # a folder was added
            return None
        if any(_signature(path) != signature for path, signature in signatures.items()):
            return None
        listing: dict[str, Any] = kept["listing"]
        return listing
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # none, or not one this code wrote
        return None


def watched(root: Path, config_path: Path, tools_dir: Path) -> dict[str, list[int] | None]:
    """The signatures of the files a listing comes from, taken before it is made: a file that
    changes while it is made leaves the cache stale, and so unused."""
    return {path: _signature(path) for path in _inputs(root, config_path, tools_dir)}


def keep_listing(root: Path, before: dict[str, list[int] | None], listing: dict[str, Any],
                 programs: list[str]) -> None:
    """Keep ``listing`` for the next ``tools list``, with the signatures of what it came from
    (``before``: :func:`watched`'s; ``programs``: the loaded tools' programs). Best effort: a
    home that cannot be written to only loses the cache."""
    from zagent_core.tools.processes import write_json

    files = before | {path: _signature(path) for path in programs}
    # A file changed in the last moments could change again within the same tick of the file
    # system's clock, its signature the same (a manifest rewritten at once, a byte changed):
    # kept only once they have all settled (git's "racy" files, the same way).
    if any(signature is not None and time.time_ns() - signature[0] < _SETTLED_NS for signature in files.values()):
        return
    try:
        (root / "cache").mkdir(parents=True, exist_ok=True)
        write_json(root / "cache" / _NAME, {"format": _FORMAT, "home": str(root), "files": files,
                                             "listing": listing})
    except OSError:
        pass
