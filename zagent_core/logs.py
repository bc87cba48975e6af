"""The engine's own logs: structlog events on top of the standard ``logging`` module.

zagent never configures logging globally as a library: its events go to the
``zagent_core.*`` loggers, which an application routes like any other (by default
Python prints warnings and errors to stderr). The CLI calls :func:`configure`.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,  # before rendering: a disabled level costs nothing
    structlog.processors.format_exc_info,
    structlog.dev.ConsoleRenderer(colors=False),
]


def get_logger(name: str) -> Any:
    """A structlog logger writing through ``logging.getLogger(name)``."""
    return structlog.wrap_logger(logging.getLogger(name), processors=_PROCESSORS,
                                 wrapper_class=structlog.stdlib.BoundLogger)


def configure(verbosity: int = 0) -> None:
    """For the command line: warnings only (0), info (1) or debug (2+), to stderr."""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)-7s %(message)s",
                        force=True)
