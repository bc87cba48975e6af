"""The model catalog (config.json's ``models``): how it loads, how spawn offers it
(``model_search`` past a few models), and what sessions cost by its prices."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import forked
from conftest import PYTHON
from test_anthropic import FakeServer as AnthropicServer, message
from test_docs import DOCS, FENCE, sections
from test_openai import FakeServer as OpenAIServer, completion
from test_spawn import reply, results, run, spawn

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import load_model
from zagent_core.builtins import model_search
from zagent_core.builtins.registry import enabled
from zagent_core.builtins.spawn import for_config
from zagent_core.config import CatalogModel, Config, SpawnConfig, load_config
from zagent_core.journal.fold import rebuild
from zagent_core.tools.model_catalog import EMBEDDED_CATALOG_MAX, Usage, cost, model_line, offered
from zagent_store.sqlite import SQLiteJournal

FAST = {"id": "fast", "spec": "openai:gpt-4o-mini", "context_window": 128000, "max_output": 16384,
        "price_in": 0.15, "price_out": 0.6, "description": "Cheap and quick, for mechanical work."}
DEEP = {"id": "deep", "spec": "anthropic:claude-opus-4-1", "context_window": 200000, "price_in": 15,
        "price_out": 75, "reasoning": True, "description": "Slow, for hard reasoning."}


def loaded(tmp_path: Path, settings: dict[str, Any]) -> tuple[Config, list[str]]:
    (tmp_path / "config.json").write_text(json.dumps(settings))
    config, problems = load_config(tmp_path / "config.json")
    return config, [problem.message for problem in problems]


def test_a_catalog_loads_and_spawn_offers_it_whole_by_default(tmp_path: Path) -> None:
    config, problems = loaded(tmp_path, {"models": [FAST, DEEP]})
    assert problems == []
    assert [entry.id for entry in offered(config)] == ["fast", "deep"]
    config, _ = loaded(tmp_path, {"models": [FAST, DEEP], "spawn": {"models": ["deep"]}})
    assert [entry.id for entry in offered(config)] == ["deep"]


def test_the_older_spawn_models_form_still_loads_and_spawns(tmp_path: Path) -> None:
    config, problems = loaded(tmp_path, {"spawn": {"models": {"fast": "openai:gpt-4o-mini"}}})
    assert problems == []
    (entry,) = offered(config)
    assert (entry.id, entry.spec, entry.price_in) == ("fast", "openai:gpt-4o-mini", None)
    assert model_line(entry) == "fast (openai), price unknown"


def test_bad_catalog_entries_are_left_out_saying_what_to_change(tmp_path: Path) -> None:
    config, problems = loaded(tmp_path, {"models": [
        FAST, {"id": "bad", "spec": "gpt-4o"}, {"id": "neg", "spec": "openai:x", "price_in": -1},
        {"id": "typo", "spec": "openai:y", "prise_in": 1}]})
    assert [entry.id for entry in config.models] == ["fast", "typo"]
    assert problems[0] == ('"models.1.spec": a model spec is PROVIDER:MODEL (openai:gpt-4o-mini, '
                           "anthropic:claude-sonnet-4-5, scripted:PATH) (got 'gpt-4o'); that model is left out of "
                           "the catalog")
    assert problems[1].startswith('"models.2.price_in": Input should be greater than or equal to 0')
    assert problems[1].endswith("that model is left out of the catalog")
    assert problems[2] == 'unknown field "models.3.prise_in" is ignored'
    config, problems = loaded(tmp_path, {"models": [FAST, FAST | {"spec": "openai:gpt-4o"}]})
    assert config.models == []
    assert problems[0].startswith('"models": the id "fast" is given to two models; give each model its own id (got ')
    assert problems[0].endswith("; using the default")


def test_a_model_is_one_line_in_the_spawn_schema(tmp_path: Path) -> None:
    config = Config(models=[CatalogModel(**FAST), CatalogModel(**DEEP)])
    assert model_line(config.models[0]) == ("fast (openai), $0.15 in / $0.6 out per 1M tokens, 128k window, "
                                            "16,384 max output: Cheap and quick, for mechanical work.")
    assert model_line(config.models[1]) == ("deep (anthropic), $15 in / $75 out per 1M tokens, 200k window, "
                                            "reasoning: Slow, for hard reasoning.")
    tool = for_config(config)
    assert tool is not None
    described = tool.parameters["properties"]["model"]["description"]
    assert described.endswith(f"\n- {model_line(config.models[0])}\n- {model_line(config.models[1])}")
    assert model_search.NAME not in enabled(config)[0]


def many(count: int) -> list[CatalogModel]:
    return [CatalogModel(id=f"m{n}", spec=f"openai:model-{n}", price_in=n, price_out=2 * n,
                         description="reasoning" if n % 3 == 0 else "") for n in range(1, count + 1)]


def test_a_large_catalog_is_found_with_model_search_not_listed() -> None:
    config = Config(models=many(EMBEDDED_CATALOG_MAX + 1))
    tool = for_config(config)
    assert tool is not None
    described = tool.parameters["properties"]["model"]["description"]
    assert "m1 " not in described and "find their ids, prices and windows with the model_search tool" in described
    assert model_search.NAME in enabled(config)[0]
    assert model_search.NAME not in enabled(config.model_copy(update={"spawn": SpawnConfig(max_depth=0)}))[0]


def test_model_search_answers_in_the_schema_s_lines(home_dir: Path, journal: SQLiteJournal, workspace: Path) -> None:
    script = {"replies": [reply("", {"name": "model_search", "arguments": {"query": "reasoning", "limit": 2}},
                                {"name": "model_search", "arguments": {"query": "model-4"}},
                                {"name": "model_search", "arguments": {"query": "nothing-like-it"}},
                                spawn("x", model="m77")),
                          reply("ok")]}
    catalog = many(EMBEDDED_CATALOG_MAX + 1)
    _, session_id = run(home_dir, journal, workspace, script, catalog=catalog)
    answers = [results(journal, session_id)[f"call_s1_{n}"].output for n in range(4)]
    assert answers[0] == ("2 of 9 models (prices: US dollars per million tokens); give spawn the id as model:\n"
                          f"- {model_line(catalog[2])}\n- {model_line(catalog[5])}")
    assert answers[1].endswith(f":\n- {model_line(catalog[3])}")
    assert answers[2] == ("No model matches 'nothing-like-it'. The models: m1, m2, m3, m4, m5, m6, m7, m8, m9. "
                          "Search again with other words.")
    assert answers[3] == ('spawn refused: unknown model "m77" (did you mean "m7"?); the models include: m1, m2, m3, '
                          "m4, m5, m6, m7, m8 and 1 more (model_search finds them)")


def test_spawn_md_shows_the_lines_and_answers_zagent_gives(home_dir: Path, journal: SQLiteJournal,
                                                          workspace: Path, tmp_path: Path) -> None:
    section = sections(DOCS / "spawn.md")["Choosing a model and `model_search`"]
    example, lines, answer = [match.group(3) for match in FENCE.finditer(section)]
    config, problems = loaded(tmp_path, json.loads(example))
    assert problems == []
    assert lines == "".join(f"{model_line(entry)}\n" for entry in config.models)
    script = [reply("", {"name": "model_search", "arguments": {"query": "reasoning", "limit": 2}}), reply("ok")]
    _, session_id = run(home_dir, journal, workspace, script, catalog=many(EMBEDDED_CATALOG_MAX + 1))
    assert answer == results(journal, session_id)["call_s1_0"].output + "\n"


def test_spawn_runs_a_child_on_a_catalog_model_by_id(home_dir: Path, journal: SQLiteJournal,
                                                     workspace: Path) -> None:
    cheap = home_dir.parent / "cheap.json"
    cheap.write_text(json.dumps([reply("done cheaply")]))
    script = [reply("", spawn("do it", model="cheap")), reply("ok")]
    catalog = [CatalogModel(id="cheap", spec=f"scripted:{cheap}", price_in=1, price_out=2)]
    _, session_id = run(home_dir, journal, workspace, script, catalog=catalog)
    assert results(journal, session_id)["call_s1_0"].output.endswith("\ndone cheaply")
    assert rebuild(journal.read(session_id)).children["child-1"].model == f"scripted:{cheap}"


def test_cache_reads_and_writes_are_priced_as_the_providers_price_them() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cache_read_tokens=1_000_000,
                  cache_write_tokens=1_000_000)
    anthropic = CatalogModel(id="a", spec="anthropic:claude", price_in=3, price_out=15)
    assert cost(anthropic, usage) == 3 + 15 + 0.3 + 3.75
    given = anthropic.model_copy(update={"price_cache_read": 1.0, "price_cache_write": 2.0})
    assert cost(given, usage) == 3 + 15 + 1 + 2
    openai = CatalogModel(id="o", spec="openai:gpt", price_in=2, price_out=8, price_cache_read=0.5)
    assert cost(openai, usage) == 2 + 8 + 0.5 + 2
    assert cost(CatalogModel(id="u", spec="openai:x", price_out=1), usage) is None


# -- costs, through the CLI -----------------------------------------------------------------


def used(text: str, *calls: dict[str, Any], **tokens: int) -> dict[str, Any]:
    """A scripted reply that reports its usage."""
    return reply(text, *calls) | {"usage": tokens}


def zagent(home: Path, *args: str, cwd: Path) -> Any:
    result = forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True, text=True,
                        cwd=cwd, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def priced_session(tmp_path: Path, priced: bool = True) -> tuple[Path, str, str]:
    """A session of two turns whose first spawns a child on the catalog's ``cheap``: (home, session, child)."""
    home, folder = tmp_path / "home", tmp_path / "work"
    folder.mkdir()
    root, cheap = tmp_path / "root.json", tmp_path / "cheap.json"
    root.write_text(json.dumps([
        used("", spawn("do it", model="cheap"), input_tokens=1000, output_tokens=100, cache_read_tokens=2000,
             cache_creation_tokens=400),
        used("both done", input_tokens=500, output_tokens=50),
        used("again", input_tokens=100, output_tokens=10)]))
    cheap.write_text(json.dumps([used("done cheaply", input_tokens=3000, output_tokens=300)]))
    catalog = [{"id": "cheap", "spec": f"scripted:{cheap}"} | ({"price_in": 0.5, "price_out": 1} if priced else {})]
    if priced:
        catalog.append({"id": "root", "spec": f"scripted:{root}", "price_in": 1, "price_out": 2,
                        "price_cache_read": 0.5, "price_cache_write": 1.5})
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"models": catalog}))
    zagent(home, "run", "--model", f"scripted:{root}", "go", cwd=folder)
    session = json.loads(zagent(home, "sessions", "list", "--json", cwd=folder).stdout)["sessions"][0]["session_id"]
    zagent(home, "resume", session, "once more", cwd=folder)
    shown = json.loads(zagent(home, "sessions", "show", session, "--json", cwd=folder).stdout)
    return home, session, shown["children"]["child-1"]["session_id"]


def test_sessions_show_and_audit_give_the_cost_per_turn_session_and_subtree(tmp_path: Path) -> None:
    home, session, child = priced_session(tmp_path)
    costs = json.loads(zagent(home, "sessions", "show", session, "--json", cwd=tmp_path).stdout)["costs"]
    # turn 1: 1000 x $1 + 100 x $2 + 2000 x $0.5 (cache read) + 400 x $1.5 (cache write), then 500 x $1 + 50 x $2
    assert [turn["cost_usd"] for turn in costs["turns"]] == [0.0034, 0.00012]
    assert costs["session"] == {"input_tokens": 1600, "output_tokens": 160, "cache_read_tokens": 2000,
                                "cache_write_tokens": 400, "cost_usd": 0.00352, "unpriced_models": []}
    # the child on cheap: 3000 x $0.5 + 300 x $1
    assert costs["subtree"]["cost_usd"] == 0.00532 and costs["subtree"]["input_tokens"] == 4600
    assert costs["descendants"] == 1
    shown = zagent(home, "sessions", "show", session, cwd=tmp_path).stdout.splitlines()
    assert "cost: $0.0035: 1,600 tokens in, 160 out, 2,000 cache read, 400 cache write" in shown
    assert "cost with 1 sub-agent: $0.0053: 4,600 tokens in, 460 out, 2,000 cache read, 400 cache write" in shown
    assert "turn 2 cost: $0.0001: 100 tokens in, 10 out, 0 cache read, 0 cache write" in shown
    audited = zagent(home, "audit", "--session", session, cwd=tmp_path).stdout.splitlines()
    assert audited[-3:] == ["cost: $0.0035: 1,600 tokens in, 160 out, 2,000 cache read, 400 cache write",
                            "cost with 1 sub-agent: $0.0053: 4,600 tokens in, 460 out, 2,000 cache read, 400 cache "
                            "write",
                            "turn 1 cost: $0.0034: 1,500 tokens in, 150 out, 2,000 cache read, 400 cache write",
                            "turn 2 cost: $0.0001: 100 tokens in, 10 out, 0 cache read, 0 cache write"][-3:]
    assert json.loads(zagent(home, "audit", "--session", session, "--json", cwd=tmp_path).stdout)["costs"] == costs
    child_costs = json.loads(zagent(home, "audit", "--session", child, "--json", cwd=tmp_path).stdout)["costs"]
    assert child_costs["session"]["cost_usd"] == child_costs["subtree"]["cost_usd"] == 0.0018
    root_line, child_line = zagent(home, "sessions", "show", session, "--tree", cwd=tmp_path).stdout.splitlines()
    assert ", $0.0053  go" in root_line and ", $0.0018  do it" in child_line
    tree = json.loads(zagent(home, "sessions", "show", session, "--tree", "--json", cwd=tmp_path).stdout)
    assert tree["costs"][session] == {"session": costs["session"], "subtree": costs["subtree"]}
    assert tree["costs"][child]["subtree"]["cost_usd"] == 0.0018


def test_a_model_without_prices_shows_its_tokens_and_an_unknown_cost(tmp_path: Path) -> None:
    home, session, _ = priced_session(tmp_path, priced=False)
    costs = json.loads(zagent(home, "sessions", "show", session, "--json", cwd=tmp_path).stdout)["costs"]
    root = f"scripted:{tmp_path / 'root.json'}"
    assert costs["session"]["cost_usd"] is None and costs["session"]["unpriced_models"] == [root]
    assert costs["subtree"]["unpriced_models"] == [root, f"scripted:{tmp_path / 'cheap.json'}"]
    shown = zagent(home, "sessions", "show", session, cwd=tmp_path).stdout.splitlines()
    assert (f"cost: unknown ({root} not priced in config.json's models): 1,600 tokens in, 160 out, 2,000 cache "
            "read, 400 cache write") in shown
    assert ", cost unknown  go" in zagent(home, "sessions", "show", session, "--tree", cwd=tmp_path).stdout


def test_replies_of_real_providers_are_priced_with_their_cache_as_each_provider_prices_it(tmp_path: Path) -> None:
    openai_server, anthropic_server = OpenAIServer(), AnthropicServer()
    for fake in (openai_server, anthropic_server):
        fake.thread.start()
    try:
        openai_server.reply(body=completion("hi") | {"usage": {
            "prompt_tokens": 1000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 600}}})
        anthropic_server.reply(message("hi", usage={"input_tokens": 100, "output_tokens": 50,
                                                    "cache_read_input_tokens": 1000,
                                                    "cache_creation_input_tokens": 2000}))
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.json").write_text(json.dumps({"model": {"stream": False}, "models": [
            {"id": "o", "spec": "openai:m", "price_in": 2, "price_out": 8, "price_cache_read": 0.5},
            {"id": "a", "spec": "anthropic:claude-test", "price_in": 3, "price_out": 15, "max_output": 1234}]}))
        environment = {"OPENAI_BASE_URL": openai_server.url, "OPENAI_API_KEY": "sk-test",
                       "ANTHROPIC_BASE_URL": anthropic_server.url, "ANTHROPIC_API_KEY": "sk-ant-test"}
        costs = {}
        for spec in ("openai:m", "anthropic:claude-test"):
            ran = forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), "run", "--model", spec, "go"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=120,
                             env={**os.environ, **environment})
            assert ran.returncode == 0, ran.stdout + ran.stderr
            shown = json.loads(zagent(home, "sessions", "show", "--json", cwd=tmp_path).stdout)
            costs[spec] = shown["costs"]["session"]
    finally:
        for fake in (openai_server, anthropic_server):
            fake.httpd.shutdown()
    # OpenAI's prompt_tokens hold its cached ones: 400 x $2 + 100 x $8 + 600 x $0.5 (the entry's cache price)
    assert costs["openai:m"] == {"input_tokens": 400, "output_tokens": 100, "cache_read_tokens": 600,
                                 "cache_write_tokens": 0, "cost_usd": 0.0019, "unpriced_models": []}
    # Anthropic's own rates: 100 x $3 + 50 x $15 + 1000 x $0.3 (0.1x) + 2000 x $3.75 (1.25x)
    assert costs["anthropic:claude-test"]["cost_usd"] == 0.00885
    # the entry's max_output is the request's max_tokens
    assert anthropic_server.requests[0]["max_tokens"] == 1234


def test_a_catalog_entry_s_window_is_what_compaction_measures_against(home_dir: Path, journal: SQLiteJournal,
                                                                     workspace: Path) -> None:
    script = home_dir.parent / "script.json"
    script.write_text(json.dumps([reply("hi")]))
    spec = f"scripted:{script}"
    config = Config(models=[CatalogModel(id="small", spec=spec, context_window=50_000)])
    with Engine(Home(home_dir), journal, workspace=workspace, config=config).start_session("test") as session:
        assert Agent(session, load_model(spec), spec=spec).window == 50_000
        assert Agent(session, load_model(spec), spec=f"{spec}-unlisted").window != 50_000
