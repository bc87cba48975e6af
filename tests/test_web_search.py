"""The web_search built-in against a fake search API on 127.0.0.1 that answers as SearXNG, Brave
and Tavily do; its key withheld from tools and redacted; through the CLI with the scripted model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from local_http import QuietHandler, one_call, replay_report, scripted_run, serving

from zagent_core.builtins import registry
from zagent_core.config import BuiltinsConfig, Config, WebSearchConfig, load_config
from zagent_core.tools.results import ToolResult

KEY = "sk-search-0123456789abcdef"
HITS = [("Retry policies", "https://example.com/retries", "How often to <strong>retry</strong> a call."),
        ("Backoff", "https://example.com/backoff", "Exponential backoff,\n   with jitter.")]


@dataclass
class Asked:
    """What the fake API was asked last, and what it answers next."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    body: bytes | None = None


def _answer(path: str, count: int) -> dict[str, Any]:
    hits = HITS[:count]
    if path.endswith("/web/search"):  # Brave
        return {"type": "search", "web": {"type": "search", "results": [
            {"title": t, "url": u, "description": s, "language": "en"} for t, u, s in hits]}}
    if path.endswith("/search") and "tavily" in path:
        return {"query": "q", "results": [{"title": t, "url": u, "content": s, "score": 0.9} for t, u, s in hits],
                "response_time": 0.5}
    return {"query": "q", "number_of_results": len(hits), "results": [
        {"title": t, "url": u, "content": s, "engine": "duckduckgo"} for t, u, s in hits]}


@pytest.fixture(scope="module")
def api() -> Iterator[tuple[str, Asked]]:
    asked = Asked()

    class Handler(QuietHandler):
        def _reply(self, body: dict[str, Any]) -> None:
            self.answer(asked.status, "application/json", asked.body if asked.body is not None
                        else json.dumps(body).encode())

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            asked.requests.append({"method": "GET", "path": url.path, "query": query, "headers": dict(self.headers)})
            self._reply(_answer(url.path, int(query.get("count", ["10"])[0])))

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked.requests.append({"method": "POST", "path": self.path, "json": body, "headers": dict(self.headers)})
            self._reply(_answer(self.path, body["max_results"]))

    with serving(Handler) as (_, url):
        yield url, asked


@pytest.fixture
def asked(api: tuple[str, Asked]) -> Asked:
    found = api[1]
    found.requests.clear()
    found.status, found.body = 200, None
    return found


def search(home_dir: Path, workspace: Path, arguments: dict[str, Any], **settings: Any) -> ToolResult:
    config = Config(builtins=BuiltinsConfig(web_search=WebSearchConfig(**settings)))
    return one_call(home_dir, workspace, config, "web_search", arguments)


def test_web_search_is_offered_only_when_a_provider_is_set() -> None:
    assert "web_search" not in registry.enabled(Config())[0]
    configured = Config(builtins=BuiltinsConfig(web_search=WebSearchConfig(provider="brave", max_results=5)))
    tool = registry.enabled(configured)[0]["web_search"]
    assert tool.replay == "unsafe" and tool.concurrency_safe is True
    assert tool.parameters["properties"]["limit"]["maximum"] == 5


def test_searxng_needs_its_base_url(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"builtins": {"web_search": {"provider": "searxng"}}}))
    _, problems = load_config(tmp_path / "config.json")
    (problem,) = problems
    assert problem.message.startswith('"builtins.web_search": provider "searxng" needs base_url: the address of '
                                      'your SearXNG instance (e.g. "http://127.0.0.1:8888")')


def test_searxng_results_are_numbered_title_url_and_snippet(home_dir: Path, workspace: Path,
                                                            api: tuple[str, Asked], asked: Asked) -> None:
    result = search(home_dir, workspace, {"query": "retry policy"}, provider="searxng", base_url=api[0])
    assert not result.is_error
    assert result.output == (
        "1. Retry policies\n   https://example.com/retries\n   How often to <strong>retry</strong> a call.\n\n"
        "2. Backoff\n   https://example.com/backoff\n   Exponential backoff, with jitter.")
    (request,) = asked.requests
    assert request["path"] == "/search" and request["query"] == {"q": ["retry policy"], "format": ["json"]}
    assert "Authorization" not in request["headers"]


def test_brave_gets_its_key_in_its_header_and_the_limit_as_count(
        home_dir: Path, workspace: Path, api: tuple[str, Asked], asked: Asked, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_BRAVE_KEY", KEY)
    result = search(home_dir, workspace, {"query": "retry", "limit": 1}, provider="brave",
                    base_url=api[0] + "/res/v1", api_key_env="TEST_BRAVE_KEY")
    assert result.output == "1. Retry policies\n   https://example.com/retries\n   How often to retry a call."
    (request,) = asked.requests
    assert request["path"] == "/res/v1/web/search" and request["query"] == {"q": ["retry"], "count": ["1"]}
    assert request["headers"]["X-Subscription-Token"] == KEY


def test_tavily_gets_a_bearer_key_and_a_json_body(home_dir: Path, workspace: Path, api: tuple[str, Asked],
                                                  asked: Asked, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_TAVILY_KEY", KEY)
    result = search(home_dir, workspace, {"query": "backoff"}, provider="tavily", base_url=api[0] + "/tavily",
                    api_key_env="TEST_TAVILY_KEY", max_results=3)
    assert result.output.startswith("1. Retry policies\n") and "\n\n2. Backoff\n" in result.output
    (request,) = asked.requests
    assert request["json"] == {"query": "backoff", "max_results": 3}
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"


def test_a_missing_key_is_said_and_nothing_is_asked(home_dir: Path, workspace: Path, api: tuple[str, Asked],
                                                    asked: Asked) -> None:
    result = search(home_dir, workspace, {"query": "q"}, provider="brave", base_url=api[0],
                    api_key_env="TEST_UNSET_KEY")
    assert result.is_error and result.output == ("web_search cannot search: brave needs a key and the variable "
                                                 "TEST_UNSET_KEY is not set; tell the user")
    assert asked.requests == []


def test_the_key_is_redacted_from_what_the_provider_says(home_dir: Path, workspace: Path, api: tuple[str, Asked],
                                                         asked: Asked, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_REDACTED_KEY", KEY)
    asked.status, asked.body = 401, f'{{"error": "token {KEY} is not valid"}}'.encode()
    result = search(home_dir, workspace, {"query": "q"}, provider="tavily", base_url=api[0] + "/tavily",
                    api_key_env="TEST_REDACTED_KEY")
    assert result.is_error and KEY not in result.output
    assert result.output == (f"the search failed: tavily at {api[0]}/tavily: it answered HTTP 401: "
                             '{"error": "token [redacted] is not valid"}')


@pytest.mark.parametrize(("body", "said"), [
    (b"<html>not json</html>", "Expecting value: line 1 column 1 (char 0)"),
    (b'{"answer": 42}', "no results list in the answer"),
    (b"[" + b"1," * (3 * 1024 * 1024) + b"1]", "its answer is over 4 MiB, more than a page of results"),
])
def test_an_answer_that_is_not_results_is_an_error(home_dir: Path, workspace: Path, api: tuple[str, Asked],
                                                    asked: Asked, body: bytes, said: str) -> None:
    asked.body = body
    result = search(home_dir, workspace, {"query": "q"}, provider="searxng", base_url=api[0])
    assert result.is_error and result.output == f"the search failed: searxng at {api[0]}: {said}"


def test_no_results_is_said(home_dir: Path, workspace: Path, api: tuple[str, Asked], asked: Asked) -> None:
    asked.body = b'{"results": []}'
    assert search(home_dir, workspace, {"query": "zzz"}, provider="searxng", base_url=api[0]).output == (
        "no results for 'zzz'")


def test_through_the_cli_the_key_is_no_tools_and_a_replay_serves_the_results(
        home_dir: Path, tmp_path: Path, api: tuple[str, Asked], asked: Asked, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_CLI_SEARCH_KEY", KEY)
    (home_dir / "config.json").write_text(json.dumps({"builtins": {"web_search": {
        "provider": "brave", "base_url": api[0], "api_key_env": "TEST_CLI_SEARCH_KEY"}}}))
    session_id, (searched, shelled) = scripted_run(home_dir, tmp_path / "script.json", [
        {"name": "web_search", "arguments": {"query": "retry policy", "limit": 2}},
        {"name": "shell", "arguments": {"command": "echo key=${TEST_CLI_SEARCH_KEY:-withheld}"}}], "Found two pages.")
    assert searched.output.startswith("1. Retry policies\n") and shelled.output == "key=withheld"
    assert asked.requests[0]["headers"]["X-Subscription-Token"] == KEY
    report = replay_report(home_dir, session_id)
    assert f"web_search ({searched.call_id})" in report["not_rerun"] and report["differences"] == [], report
    assert len(asked.requests) == 1  # served, not asked again


def test_a_provider_without_its_key_is_a_warning_of_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_NEVER_SET_KEY", raising=False)
    unset = Config(builtins=BuiltinsConfig(web_search=WebSearchConfig(provider="tavily",
                                                                      api_key_env="TEST_NEVER_SET_KEY")))
    assert [p.message for p in registry.enabled(unset)[1]] == [
        "web_search: tavily needs a key and the variable TEST_NEVER_SET_KEY is not set; its calls will fail until it is"]
    nameless = Config(builtins=BuiltinsConfig(web_search=WebSearchConfig(provider="brave")))
    assert [p.message for p in registry.enabled(nameless)[1]] == [
        "web_search: brave needs a key and builtins.web_search.api_key_env names no variable; its calls will fail "
        "until it is"]
    searxng = Config(builtins=BuiltinsConfig(web_search=WebSearchConfig(provider="searxng", base_url="http://h")))
    assert registry.enabled(searxng)[1] == []
