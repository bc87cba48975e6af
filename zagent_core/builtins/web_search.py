"""The built-in ``web_search`` tool: a query to the search API ``config.json`` names, its results numbered.

Offered only when ``builtins.web_search.provider`` is set. The providers (SearXNG, Brave,
Tavily) are modules of :mod:`zagent_core.builtins.search_providers`; everything else is
here, the same for each: the key (read once from the variable the config names, withheld
from every tool and redacted from what the model is shown, as the model's key is), the
timeout, the cap on the answer read, and the numbered title, URL and snippet of each result.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from zagent_core.builtins.api_calls import asked
from zagent_core.builtins.search_providers import Hit, provider
from zagent_core.config import Config, WebSearchConfig
from zagent_core.problems import Problem
from zagent_core.tools import credentials
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext, object_schema
from zagent_core.tools.results import ToolResult
from zagent_core.version import zagent_version

NAME = "web_search"
#: The most of a provider's answer read: a page of 20 results is some 100 KiB at most.
ANSWER_CAP = 4 * 1024 * 1024
#: What one result may show of each part, in characters.
_TITLE, _URL, _SNIPPET = 200, 1000, 500


def parameters(settings: WebSearchConfig) -> dict[str, Any]:
    return object_schema({
        "query": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "What to search for."},
        "limit": {"type": "integer", "minimum": 1, "maximum": settings.max_results,
                  "description": f"Results answered at most (default and most: {settings.max_results})."},
    }, ["query"])


def description(settings: WebSearchConfig) -> str:
    return ("Search the web and answer the results, numbered: title, URL and a snippet each. Fetch a result with "
            f"fetch_url to read it. At most {settings.max_results} results.")


def _missing_key(settings: WebSearchConfig) -> str | None:
    """What is missing for the provider's key, or None: it has one, or needs none."""
    if settings.provider is None or not provider(settings.provider).needs_key:
        return None
    if not settings.api_key_env:
        return f"{settings.provider} needs a key and builtins.web_search.api_key_env names no variable"
    if not credentials.take(settings.api_key_env):
        return f"{settings.provider} needs a key and the variable {settings.api_key_env} is not set"
    return None


def config_problems(config: Config) -> list[Problem]:
    """A provider that needs a key without one: every call would fail, so it is said before."""
    missing = _missing_key(config.builtins.web_search)
    return [] if missing is None else [Problem(source="config.json", severity="warning",
                                               message=f"web_search: {missing}; its calls will fail until it is")]


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Ask the provider one query and answer its results."""
    settings = context.config.builtins.web_search
    if settings.provider is None:
        return ToolResult(output="web_search is not configured: builtins.web_search.provider is not set in "
                                 "config.json", is_error=True)
    if (missing := _missing_key(settings)) is not None:
        return ToolResult(output=f"web_search cannot search: {missing}; tell the user", is_error=True)
    chosen = provider(settings.provider)
    key = credentials.take(settings.api_key_env) if settings.api_key_env else None
    query = arguments["query"]
    limit = min(int(arguments.get("limit", settings.max_results)), settings.max_results)
    base_url = settings.base_url or chosen.default_base_url or ""
    try:
        with httpx.Client(timeout=settings.timeout_seconds,
                          headers={"User-Agent": f"zagent/{zagent_version()} (web_search)"}) as client:
            body = asked(client, chosen.request(client, base_url, query, limit, key), ANSWER_CAP,
                         "a page of results")
        hits = chosen.hits(json.loads(body))[:limit]
    except httpx.TimeoutException:
        output, failed = (f"{settings.provider} did not answer within builtins.web_search.timeout_seconds "
                          f"({settings.timeout_seconds:g} s)"), True
    except (httpx.HTTPError, ValueError) as exc:  # json's errors are ValueErrors
        output, failed = f"the search failed: {settings.provider} at {base_url}: {exc}", True
    else:
        output, failed = _numbered(query, hits), False
    # A provider may quote the request back (an error page): the key never reaches the model or the journal.
    return ToolResult(output=credentials.redact(output, key or "", credentials.REDACTED), is_error=failed)


def _numbered(query: str, hits: list[Hit]) -> str:
    if not hits:
        return f"no results for {query!r}"
    return "\n\n".join(
        f"{number}. {_cut(hit.title, _TITLE) or '(no title)'}\n   {_cut(hit.url, _URL)}"
        + (f"\n   {_cut(' '.join(hit.snippet.split()), _SNIPPET)}" if hit.snippet else "")
        for number, hit in enumerate(hits, start=1))


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 1] + "…"


TOOL = Builtin(
    name=NAME, description=description(WebSearchConfig()), parameters=parameters(WebSearchConfig()), run=run,
    # It only reads: beside other reads it changes nothing they see.
    concurrency_safe=True,
    # Results change from one day to the next: a replay serves the recorded ones.
    replay="unsafe",
)


def for_config(config: Config) -> Builtin | None:
    """The tool as ``config`` sets it up; None (not offered) when no provider is set."""
    settings = config.builtins.web_search
    if settings.provider is None:
        return None
    return TOOL.shaped(description(settings), parameters(settings))
