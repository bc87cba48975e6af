"""How every command ends when a person stops it (Ctrl-C, or SIGTERM where a command makes it one).

Light on purpose (nothing but ``sys``): the program's entry uses it while the CLI is still loading.
"""

from __future__ import annotations

import sys
from typing import NoReturn


def exit_stopped(line: str) -> NoReturn:
    """Say ``line`` on stderr (on a terminal after the ``^C`` it echoed, on a line of its own) and exit 130.

    CPython marks a KeyboardInterrupt that ends a string ``exec`` (a dataclass's methods are
    made so, while a module loads) as unhandled even when it is caught, and ``python -m``
    then dies of SIGINT instead of exiting 130. Each string ``exec`` clears that mark first:
    one more, once the interrupt is handled, keeps the exit code ours.
    """
    sys.stderr.write(("\n" if sys.stderr.isatty() else "") + line + "\n")
    exec("pass", {})  # noqa: S102 - clears CPython's mark, as said above
    sys.exit(130)


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C in disguise: one that landed while pydantic built a model
    class (a command's first import of the journal's events) comes out of pydantic-core as a
    ``SchemaError`` whose message names the ``KeyboardInterrupt``."""
    return type(exc).__name__ == "SchemaError" and "KeyboardInterrupt" in str(exc)
