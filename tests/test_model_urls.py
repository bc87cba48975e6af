"""A base URL with credentials in it (``https://user:pass@host/v1?key=...``): sent as they
must be (basic auth, the query after the path), never journaled or shown."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import forked
from conftest import PYTHON
from test_anthropic import FakeServer as MessagesServer, message
from test_openai import FakeServer, completion

from zagent_core.agent.models import Message, ModelError
from zagent_core.agent.models.anthropic import AnthropicModel
from zagent_core.agent.models.endpoint import shown_url
from zagent_core.agent.models.openai import OpenAIModel
from zagent_core.journal.events import TurnStarted
from zagent_store import SQLiteJournal

PASSWORD = "pa:ss/word-0451"  # a ':' and a '/' percent-encoded in the URL
QUERY_KEY = "sk-query-secret-7788"
QUERY = f"api-version=2024-06-01&key={QUERY_KEY}"
BASIC = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
SECRETS = (PASSWORD, "pa%3Ass%2Fword-0451", QUERY_KEY, "alice")


def with_credentials(url: str) -> str:
    """``url`` (``http://127.0.0.1:PORT/...``) with a user, a password and a query."""
    return url.replace("http://", "http://alice:pa%3Ass%2Fword-0451@") + "?" + QUERY


def test_the_query_goes_after_the_path_and_the_userinfo_as_basic_auth(server: FakeServer) -> None:
    server.reply(body=completion("hi"))
    model = OpenAIModel("m", base_url=with_credentials(server.url), api_key="", max_retries=0)
    assert model.reply([Message(role="user", content="hello")], []).text == "hi"
    assert server.paths == [f"/v1/chat/completions?{QUERY}"]
    assert server.headers[0]["Authorization"] == BASIC


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    fake.thread.start()
    yield fake
    fake.httpd.shutdown()


@pytest.fixture
def messages() -> Iterator[MessagesServer]:
    fake = MessagesServer()
    fake.thread.start()
    yield fake
    fake.httpd.shutdown()


def test_anthropic_sends_the_query_and_basic_auth_next_to_its_key(messages: MessagesServer) -> None:
    messages.reply(message("hi"))
    model = AnthropicModel("m", base_url=with_credentials(messages.url), api_key="sk-ant-key", max_retries=0)
    assert model.reply([Message(role="user", content="hello")], []).text == "hi"
    assert messages.paths == [f"/v1/messages?{QUERY}"]
    assert messages.headers[0]["Authorization"] == BASIC and messages.headers[0]["X-Api-Key"] == "sk-ant-key"


def test_the_url_is_shown_with_its_userinfo_and_query_values_masked() -> None:
    assert (shown_url("https://alice:pw@example.com:8443/v1/?api-version=2024-06-01&key=sk-1&flag")
            == "https://***@example.com:8443/v1?api-version=***&key=***&***")
    assert shown_url("https://token@example.com/v1") == "https://***@example.com/v1"
    assert shown_url("http://127.0.0.1:11434/v1/") == "http://127.0.0.1:11434/v1"


def test_an_http_error_names_the_url_masked_even_when_the_server_echoes_it(server: FakeServer) -> None:
    server.reply(404, {"error": f"no route POST /v1/chat/completions?{QUERY} (password {PASSWORD})"})
    model = OpenAIModel("m", base_url=with_credentials(server.url), api_key="", max_retries=0)
    with pytest.raises(ModelError) as raised:
        model.reply([Message(role="user", content="hello")], [])
    problem = str(raised.value)
    assert f"HTTP 404 from http://***@127.0.0.1:{server.httpd.server_address[1]}/v1/chat/completions" in problem
    assert "?api-version=***&key=***" in problem
    assert not [secret for secret in SECRETS if secret in problem], problem
    assert "[redacted]" in problem  # what the server echoed


def _zagent(home: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True, text=True,
                      timeout=60, cwd=home.parent, env=env)


def _journal_text(home: Path) -> bytes:
    return b"".join(path.read_bytes() for path in home.rglob("journal.db*"))


def test_run_and_resume_reach_such_a_url_and_journal_it_masked(server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"model": {"max_retries": 0}}))
    base = {name: value for name, value in os.environ.items()
            if name not in ("ZAGENT_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env = {**base, "OPENAI_BASE_URL": with_credentials(server.url)}
    server.reply(body=completion("first"))
    server.reply(body=completion("second"))
    ran = _zagent(home, "run", "--model", "openai:m", "go", env=env)
    assert ran.returncode == 0, ran.stderr
    with SQLiteJournal(home / "journal.db") as journal:
        (session,) = journal.sessions()
        session_id = session.session_id
        (started,) = [e.event for e in journal.read(session_id) if isinstance(e.event, TurnStarted)]
    assert started.model_base_url == f"http://***@127.0.0.1:{server.httpd.server_address[1]}/v1?api-version=***&key=***"

    resumed = _zagent(home, "resume", session_id, "again", env=env)  # the credentials, found where they came from
    assert resumed.returncode == 0, resumed.stderr
    assert "second" in resumed.stdout
    assert server.paths == [f"/v1/chat/completions?{QUERY}"] * 2 and server.headers[1]["Authorization"] == BASIC

    lost = _zagent(home, "resume", session_id, "once more", env=base)  # nowhere to find them: said, not guessed
    assert lost.returncode != 0 and "whose credentials the journal does not keep" in lost.stderr, lost.stderr
    assert "Traceback" not in lost.stderr and len(server.paths) == 2
    shown = ran.stdout + ran.stderr + resumed.stdout + resumed.stderr + lost.stdout + lost.stderr
    journaled = _journal_text(home)
    assert not [secret for secret in SECRETS if secret in shown or secret.encode() in journaled]


