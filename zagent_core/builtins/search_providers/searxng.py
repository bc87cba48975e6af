"""SearXNG, self-hosted: ``GET /search?q=...&format=json`` (the instance must have ``json`` among
its ``search.formats``); ``results[]`` of ``title``, ``url``, ``content``. It has no key of its
own: one that is set is sent as a bearer token, for an instance behind a proxy that asks one."""

from __future__ import annotations

from typing import Any

import httpx

from zagent_core.builtins.search_providers import Hit, results, text


class SearXNG:
    default_base_url = None
    needs_key = False

    def request(self, client: httpx.Client, base_url: str, query: str, limit: int, key: str | None) -> httpx.Request:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return client.build_request("GET", f"{base_url.rstrip('/')}/search", params={"q": query, "format": "json"},
                                    headers=headers)

    def hits(self, body: Any) -> list[Hit]:
        return [Hit(text(item, "title"), text(item, "url"), text(item, "content")) for item in results(body, "results")]


PROVIDER = SearXNG()
