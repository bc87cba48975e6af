"""The model's keys (and web_search's): read once, then out of every environment a tool can read.

A tool can read its own environment and, on Linux, its parent's as the parent started:
``/proc/$PPID/environ`` shows the memory between ``env_start`` and ``env_end`` of
``/proc/PID/stat``, the block the kernel wrote when zagent was started, whatever zagent
did to ``os.environ`` since. So a key is taken out three ways: deleted from
``os.environ`` (children no longer inherit it), its bytes overwritten in that initial
block (as programs that take a password on their command line hide it from ``ps``), and
the process made non-dumpable, as ``ssh-agent`` does, so that another process of the same
user cannot read it from zagent's memory (``/proc/$PPID/mem``) or attach a debugger.

This module sits below both the tools and the models: the provider takes its key here,
and every tool environment is built by :func:`tool_environment`.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zagent_core.config import Config

#: Where a provider looks for its key after the variable ``model.api_key_env`` names
#: (``ZAGENT_API_KEY``, then the provider's own). No tool ever gets these, whether a
#: provider took them or not.
KEY_VARIABLES = ("ZAGENT_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")

_PR_SET_DUMPABLE = 4

#: What a key is replaced with wherever it would be journaled or shown.
REDACTED = "[redacted]"

#: Keys taken from the environment so far, by variable name (a process may build several providers).
_taken: dict[str, str] = {}


def take(name: str) -> str | None:
    """The value of environment variable ``name``; from now on no tool can read it.

    The first call removes it from this process's environment and its initial
    environment block and makes the process non-dumpable; later calls return the value
    kept in memory (or a new one, if the variable was set again since).
    """
    value = os.environ.pop(name, None)
    if value is None:
        return _taken.get(name)
    _taken[name] = value
    _blank_initial_value(name)
    if value:
        _forbid_inspection()
    return value


def take_model_key(api_key_env: str | None, provider_env: str = "OPENAI_API_KEY") -> str | None:
    """The model's key: the first of ``api_key_env``, the provider's own variable
    (``provider_env``) and ``ZAGENT_API_KEY`` that is set and not empty (the provider's own
    first, so a key meant for one provider is not sent to another). Every key variable is
    taken (see :func:`take`), whichever holds the key."""
    searched = list(dict.fromkeys([*([api_key_env] if api_key_env else []), provider_env, "ZAGENT_API_KEY"]))
    values = {name: take(name) for name in dict.fromkeys([*searched, *KEY_VARIABLES])}
    return next((values[name] for name in searched if values[name]), None)


def withhold_keys(config: Config) -> None:
    """Take every key the model providers of ``config`` would read, and ``web_search``'s, out of
    every environment a program zagent starts could read: before the first tool, or MCP
    server, starts, whether a provider is built or not."""
    take_model_key(config.model.api_key_env)
    take_model_key(config.model.anthropic.api_key_env, "ANTHROPIC_API_KEY")
    if config.builtins.web_search.api_key_env:
        take(config.builtins.web_search.api_key_env)


def withheld(name: str) -> bool:
    """Whether a tool must not get variable ``name``: zagent's own, a key's, or one a key was taken from."""
    return name.startswith("ZAGENT_") or name in KEY_VARIABLES or name in _taken


def tool_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) without the variables a tool must not get."""
    environ = os.environ if environ is None else environ
    return {key: value for key, value in environ.items() if not withheld(key)}


def redact(value: Any, secret: str, mark: str) -> Any:
    """``value`` (text, or JSON as ``json.loads`` gives it) with every ``secret`` in it replaced by ``mark``."""
    if not secret:
        return value
    if isinstance(value, str):
        return value.replace(secret, mark)
    if isinstance(value, list):
        return [redact(item, secret, mark) for item in value]
    if isinstance(value, dict):
        return {redact(key, secret, mark): redact(item, secret, mark) for key, item in value.items()}
    return value


def _blank_initial_value(name: str) -> None:
    """Overwrite with NULs the value of every ``name=`` entry in the initial environment block.

    Linux only: elsewhere there is no ``/proc/self/stat`` and nothing to do. libc's
    ``environ`` strings point into this block, which is why only the value bytes of this
    one variable are touched (after :func:`os.environ.pop` no pointer refers to them).
    """
    try:
        with open("/proc/self/stat", "rb") as handle:
            # After the command name in parentheses, fields start at number 3 (state):
            # env_start and env_end are fields 50 and 51.
            fields = handle.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])
    except (OSError, IndexError, ValueError):
        return
    if not 0 < start < end:
        return
    block = ctypes.string_at(start, end - start)
    prefix = os.fsencode(name) + b"="
    offset = 0
    for entry in block.split(b"\0"):
        if entry.startswith(prefix):
            ctypes.memset(start + offset + len(prefix), 0, len(entry) - len(prefix))
        offset += len(entry) + 1


def _forbid_inspection() -> None:
    """``prctl(PR_SET_DUMPABLE, 0)``: no ptrace, no ``/proc/PID/mem`` or ``environ`` for other
    processes of the user. Children are unaffected (``execve`` makes them dumpable again)."""
    try:
        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: there is no prctl
        return
