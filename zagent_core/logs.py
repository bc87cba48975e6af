"""The engine's own logs: structlog events on top of the standard ``logging`` module.

zagent never configures logging globally as a library: its events go to the
``zagent_core.*`` loggers, which an application routes like any other (by default
Python prints warnings and errors to stderr). The CLI calls :func:`configure`.
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any


@functools.cache
def _processors() -> list[Any]:
    import structlog

    return [
        structlog.stdlib.filter_by_level,  # before rendering: a disabled level costs nothing
        structlog.processors.format_exc_info,
        structlog.dev.ConsoleRenderer(colors=False),
    ]


class _Logger:
    """A structlog logger made on its first use: modules take their logger when imported, and
    structlog's import was a third of a background task's supervisor start-up, which logs only
    when something goes wrong."""

    __slots__ = ("_name", "_logger")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attribute: str) -> Any:
        if self._logger is None:
            import structlog

            self._logger = structlog.wrap_logger(logging.getLogger(self._name), processors=_processors(),
                                                 wrapper_class=structlog.stdlib.BoundLogger)
        return getattr(self._logger, attribute)


def get_logger(name: str) -> Any:
    """A structlog logger writing through ``logging.getLogger(name)``."""
    return _Logger(name)


def configure(verbosity: int = 0) -> None:
    """For the command line: warnings only (0), info (1) or debug (2+), to stderr."""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)-7s %(message)s",
                        force=True)
