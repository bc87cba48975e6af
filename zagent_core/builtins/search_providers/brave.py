"""Brave Search API: ``GET /web/search?q=...&count=N`` with the key in ``X-Subscription-Token``;
``web.results[]`` of ``title``, ``url``, ``description`` (which marks matches with ``<strong>``)."""

from __future__ import annotations

import re
from typing import Any

import httpx

from zagent_core.builtins.search_providers import Hit, results, text

_TAG = re.compile(r"</?strong>")


class Brave:
    default_base_url = "https://api.search.brave.com/res/v1"
    needs_key = True

    def request(self, client: httpx.Client, base_url: str, query: str, limit: int, key: str | None) -> httpx.Request:
        return client.build_request("GET", f"{base_url.rstrip('/')}/web/search", params={"q": query, "count": limit},
                                    headers={"X-Subscription-Token": key or "", "Accept": "application/json"})

    def hits(self, body: Any) -> list[Hit]:
        return [Hit(text(item, "title"), text(item, "url"), _TAG.sub("", text(item, "description")))
                for item in results(body, "web", "results")]


PROVIDER = Brave()
