"""The search APIs ``web_search`` asks, each a module with a ``PROVIDER`` behind :class:`Provider`.

A provider only says how a search is asked (:meth:`Provider.request`) and how its answer is
read (:meth:`Provider.hits`); sending it, its timeout, its size cap, its errors and what the
model is shown are ``web_search``'s, the same for all.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from zagent_core.config import SearchProviderName


@dataclass(frozen=True)
class Hit:
    """One result: what the model is shown of it."""

    title: str
    url: str
    snippet: str


class Provider(Protocol):
    #: Where it is reached when ``builtins.web_search.base_url`` is not set (None: it must be).
    default_base_url: str | None
    #: Whether it answers without a key.
    needs_key: bool

    def request(self, client: httpx.Client, base_url: str, query: str, limit: int, key: str | None) -> httpx.Request:
        """The request that asks ``query`` for ``limit`` results at most."""
        ...

    def hits(self, body: Any) -> list[Hit]:
        """The results of an answer (its JSON); ValueError when it is not the provider's shape."""
        ...


def provider(name: SearchProviderName) -> Provider:
    found: Provider = importlib.import_module(f"{__name__}.{name}").PROVIDER
    return found


def results(body: Any, *path: str) -> list[dict[str, Any]]:
    """The list of result objects at ``path`` in ``body``; ValueError when there is none."""
    for key in path:
        if not isinstance(body, dict):
            break
        body = body.get(key)
    if not isinstance(body, list):
        raise ValueError(f"no {'.'.join(path)} list in the answer")
    return [item for item in body if isinstance(item, dict)]


def text(item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    return value.strip() if isinstance(value, str) else ""
