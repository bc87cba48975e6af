"""Tavily: ``POST /search`` with ``{"query", "max_results"}`` and the key as a bearer token;
``results[]`` of ``title``, ``url``, ``content``."""

from __future__ import annotations

from typing import Any

import httpx

from zagent_core.builtins.search_providers import Hit, results, text


class Tavily:
    default_base_url = "https://api.tavily.com"
    needs_key = True

    def request(self, client: httpx.Client, base_url: str, query: str, limit: int, key: str | None) -> httpx.Request:
        return client.build_request("POST", f"{base_url.rstrip('/')}/search",
                                    json={"query": query, "max_results": limit},
                                    headers={"Authorization": f"Bearer {key or ''}"})

    def hits(self, body: Any) -> list[Hit]:
        return [Hit(text(item, "title"), text(item, "url"), text(item, "content")) for item in results(body, "results")]


PROVIDER = Tavily()
