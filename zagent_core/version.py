"""The version of zagent that runs: journaled on each session start and resume, sent as
the HTTP clients' User-Agent and as the MCP peer's implementation version."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version


@functools.cache
def zagent_version() -> str:
    """The installed distribution's version, or ``0+unknown`` when run from a bare checkout."""
    try:
        return version("zagent")
    except PackageNotFoundError:
        return "0+unknown"
