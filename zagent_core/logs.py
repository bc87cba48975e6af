"""The engine's own logs (structlog), to stderr, never mixed into what tools print.

An application that configures structlog itself keeps its configuration; otherwise
zagent logs warnings and errors to stderr, so a library user's stdout stays theirs.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog


def configure(verbosity: int = 0, stream: TextIO | None = None) -> None:
    """Warnings only (0), info (1) or debug (2+), as ``ts [level] event key=value`` lines."""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
    )


def get_logger(name: str) -> Any:
    """A logger for ``name``, with zagent's defaults if nobody configured structlog."""
    if not structlog.is_configured():
        configure()
    return structlog.get_logger(name)
