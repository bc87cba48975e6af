"""``zagent ui`` (issue 28): the web console, served by a real ``zagent ui`` process over a
home whose sessions the scripted model made with the real CLI.

The HTTP tests speak plain HTTP to it (the token, the pages, CSRF, the live stream); the
browser tests drive Debian's chromium with Playwright and save a screenshot of each page
(``ZAGENT_UI_SCREENSHOTS=docs/img`` writes them into the docs).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlencode, urlsplit

import pytest
from conftest import python_tool
from test_approvals import DEPLOY, ENV
from test_ask_user import zagent
from test_spawn_cli import TREE

from zagent_core.journal.events import ApprovalDecided, InputAnswered, ToolCallFinished, ToolCallInterrupted
from zagent_store import SQLiteJournal

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

LOOKING = [{"text": "Let me look.", "tool_calls": [{"id": "c1", "name": "list_files", "arguments": {"path": "."}}]},
           {"text": "Nothing here <b>yet</b>."}]
DEPLOYING = [{"text": "Deploying.", "tool_calls": [{"id": "dep1", "name": "deploy", "arguments": {"env": "prod"}}]},
             {"text": "Deployed."}]
#: A reply that thought first and says what it used, the summary ``zagent compact`` asks for, and a reply after it.
PRICED = [{"text": "Priced reply.", "thinking": [{"thinking": "The user wants a <price>.", "signature": "s"}],
           "usage": {"input_tokens": 1000, "output_tokens": 100}},
          {"text": "SUMMARY: a price was asked for", "usage": {"input_tokens": 50, "output_tokens": 10}},
          {"text": "After the summary.", "usage": {"input_tokens": 200, "output_tokens": 20}}]
ASKING = [{"text": "I need to ask.", "tool_calls": [{"id": "ask1", "name": "ask_user", "arguments": {
    "question": "Which colour should the button be?", "choices": ["red", "blue"]}}]}, {"text": "Going with it."}]


@dataclass
class Home:
    root: Path
    sessions: dict[str, str]

    def run(self, name: str, script: list | dict, prompt: str) -> str:
        """A session run by the scripted model: its id, kept under ``name``."""
        path = self.root.parent / f"{name}.json"
        path.write_text(json.dumps(script))
        ran = zagent(self.root, "run", "--json", "--model", f"scripted:{path}", prompt)
        self.sessions[name] = json.loads(ran.stdout)["session_id"]
        return self.sessions[name]

    def events(self, name: str) -> list:
        with SQLiteJournal(self.root / "journal.db") as journal:
            return [stored.event for stored in journal.read(self.sessions[name])]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    root = tmp_path_factory.mktemp("ui") / "home"
    (root / "tools").mkdir(parents=True)
    python_tool(root, "deploy", DEPLOY, parameters=ENV, permission="ask")
    made = Home(root, {})
    made.run("looking", LOOKING, "look <around>")
    made.run("live", [{"text": "First reply."}, {"text": "Second reply, drawn live."}], "watch me")
    made.run("tree", TREE, "fan out")
    for number in (1, 2):
        made.run(f"deploying{number}", DEPLOYING, f"deploy it, take {number}")
        made.run(f"asking{number}", ASKING, f"ask me, take {number}")
    made.run("asking3", ASKING, "ask me, take 3")
    priced = made.run("priced", PRICED, "what does it cost")
    for args in (("compact", priced), ("resume", priced, "go on")):
        done = zagent(root, *args)
        assert done.returncode == 0, done.stderr
    # The catalog prices the priced session's model only: the console reads it for each page.
    (root / "config.json").write_text(json.dumps({"models": [
        {"id": "priced", "spec": f"scripted:{root.parent / 'priced.json'}", "price_in": 1, "price_out": 2}]}))
    return made


@dataclass
class Console:
    url: str
    token: str
    process: subprocess.Popen[str]

    @property
    def netloc(self) -> str:
        return urlsplit(self.url).netloc

    def request(self, method: str, path: str, body: dict[str, str] | None = None, *,
                cookie: bool = True, said: str = "") -> http.client.HTTPResponse:
        """``said``: the value of the cookie a form's redirect sets, sent too."""
        connection = http.client.HTTPConnection(self.netloc, timeout=30)
        port = urlsplit(self.url).port
        headers = {"Cookie": f"zagent_ui_{port}={self.token}" + (f"; zagent_ui_{port}_said={said}" if said else "")
                   } if cookie else {}
        data = None
        if body is not None:
            data = urlencode(body)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        connection.request(method, path, data, headers)
        return connection.getresponse()

    def follow(self, response: http.client.HTTPResponse) -> tuple[int, str]:
        """The page a form's 303 sends the browser to, with the cookie the 303 set (what the POST found)."""
        assert response.status == 303, (response.status, response.read())
        said = (response.getheader("Set-Cookie") or "").partition(";")[0].partition("=")[2]
        landed = self.request("GET", response.getheader("Location") or "", said=said)
        return landed.status, landed.read().decode()

    def page(self, path: str) -> str:
        response = self.request("GET", path)
        assert response.status == 200, (response.status, response.read())
        return response.read().decode()

    def csrf(self, session_id: str) -> str:
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', self.page(f"/sessions/{session_id}"))
        assert found, "the session's page has no form"
        return found.group(1)


def serve(home: Path, *options: str) -> Iterator[Console]:
    """``zagent [OPTIONS] ui --port 0`` in a real process, until the test is done; its URL from its first line."""
    process = subprocess.Popen([sys.executable, "-m", "zagent_cli", "--home", str(home), *options, "ui", "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                               cwd=home.parent)
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    try:
        assert url.startswith("http://127.0.0.1:"), (url, process.communicate(timeout=30))
        yield Console(url, url.partition("?token=")[2], process)
    finally:
        process.terminate()
        process.communicate(timeout=30)


@pytest.fixture(scope="module")
def console(home: Home) -> Iterator[Console]:
    yield from serve(home.root)


def test_a_request_without_the_token_gets_no_session_data(console: Console, home: Home) -> None:
    for path in ("/", f"/sessions/{home.sessions['looking']}", "/audit", f"/sessions/{home.sessions['looking']}/events"):
        refused = console.request("GET", path, cookie=False)
        body = refused.read().decode()
        assert refused.status == 403 and home.sessions["looking"] not in body and "?token=" in body
    wrong = console.request("GET", "/?token=guessed", cookie=False)
    assert wrong.status == 403


def test_the_token_in_the_url_sets_a_cookie_and_leaves_the_url(console: Console) -> None:
    response = console.request("GET", f"/?status=idle&token={console.token}", cookie=False)
    assert response.status == 303 and response.getheader("Location") == "/?status=idle"
    cookie = response.getheader("Set-Cookie") or ""
    assert cookie.startswith(f"zagent_ui_{urlsplit(console.url).port}={console.token};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie


def test_the_list_shows_each_top_level_session_with_its_status_prompt_and_model(console: Console, home: Home) -> None:
    listed = console.page("/")
    assert "look &lt;around&gt;" in listed and "<around>" not in listed
    for name in ("looking", "tree", "deploying1", "asking1"):
        assert home.sessions[name] in listed
    assert listed.count("waiting on approval") >= 2 and listed.count("waiting on user") >= 2
    assert "scripted:" in listed
    only = console.page("/?" + urlencode({"status": "waiting on user"}))
    assert home.sessions["asking1"] in only and home.sessions["looking"] not in only
    searched = console.page("/?q=fan+out")
    assert home.sessions["tree"] in searched and home.sessions["looking"] not in searched


def test_the_list_pages_by_keyset(home: Home) -> None:
    from zagent_cli.ui import listing

    with SQLiteJournal(home.root / "journal.db", read_only=True) as journal:
        everything = listing.sessions_page(journal)
        page_size, listing.PAGE_SIZE = listing.PAGE_SIZE, 2
        try:
            first = listing.sessions_page(journal)
            second = listing.sessions_page(journal, after=first.next_after)
        finally:
            listing.PAGE_SIZE = page_size
    ids = [row.session_id for row in everything.rows]
    assert [row.session_id for row in first.rows + second.rows] == ids[:4] and everything.next_after is None


def test_a_filter_looks_at_a_bounded_number_of_sessions_for_a_page(home: Home) -> None:
    from zagent_cli.ui import listing

    with SQLiteJournal(home.root / "journal.db", read_only=True) as journal:
        everything = [row.session_id for row in listing.sessions_page(journal).rows]
        scan_limit, listing.SCAN_LIMIT = listing.SCAN_LIMIT, 3
        try:
            none = listing.sessions_page(journal, search="no such words")
            rest = listing.sessions_page(journal, search="no such words", after=none.next_after)
            ended = listing.sessions_page(journal, search="fan out", after=everything[-2])
        finally:
            listing.SCAN_LIMIT = scan_limit
    assert (none.rows, none.scanned, none.next_after) == ([], 3, everything[2])
    assert rest.scanned == 3 and rest.next_after == everything[5]
    assert (ended.scanned, ended.next_after) == (1, None)


def test_a_session_page_shows_the_conversation_calls_and_timeline(console: Console, home: Home) -> None:
    page = console.page(f"/sessions/{home.sessions['looking']}")
    assert "look &lt;around&gt;" in page and "Nothing here &lt;b&gt;yet&lt;/b&gt;." in page
    assert "-&gt; list_files (c1)" in page and "&lt;- list_files: ok," in page
    assert '<svg class="timeline"' in page and "<title>list_files (c1): ok" in page
    assert f'data-part="/sessions/{home.sessions["looking"]}?all=1"' in console.page(
        f"/sessions/{home.sessions['looking']}?all=1")  # redrawn live, it stays whole


def test_a_long_session_shows_its_last_turns_and_links_to_the_whole(home: Home) -> None:
    from zagent_cli.ui.pages import session_main
    from zagent_core.journal.snapshots import open_state

    with SQLiteJournal(home.root / "journal.db", read_only=True) as journal:
        state = open_state(journal, home.sessions["looking"])
    drawn = session_main(state, "idle", [], [], "", "csrf", earlier_turns=3)
    assert f'3 earlier turns not shown: <a href="/sessions/{state.session_id}?all=1">' in drawn


def test_a_session_page_links_its_children_and_the_child_its_parent(console: Console, home: Home) -> None:
    parent = home.sessions["tree"]
    page = console.page(f"/sessions/{parent}")
    children = re.findall(r'<a href="/sessions/([^"]+)">', page)
    assert len(set(children)) == 2
    # The two spawn calls ran at once: two bars, on two lanes of the timeline.
    lanes = re.findall(r'<g class="bar ok"><title>spawn [^<]*</title><rect x="[0-9.]+" y="([0-9]+)"', page)
    assert sorted(lanes) == ["2", "24"]
    # With its sub-agents at any depth, as `zagent sessions show` says it (the catalog prices none of their models).
    shown = zagent(home.root, "sessions", "show", parent).stdout
    assert "cost with 3 sub-agents: unknown (" in shown and "<tr><td>cost with 3 sub-agents</td><td>unknown (" in page
    child = console.page(f"/sessions/{children[0]}")
    assert f'<a href="/sessions/{parent}">{parent}</a>' in child


def test_an_unknown_session_is_said_plainly(console: Console) -> None:
    response = console.request("GET", "/sessions/nope")
    assert response.status == 404 and "No session" in response.read().decode()


def test_a_decision_without_the_forms_csrf_token_is_refused(console: Console, home: Home) -> None:
    session_id = home.sessions["deploying2"]
    refused = console.request("POST", f"/sessions/{session_id}/approve", {"call_id": "dep1", "csrf": "0" * 64})
    assert refused.status == 403 and "CSRF" in refused.read().decode()
    assert not any(isinstance(event, ApprovalDecided) for event in home.events("deploying2"))


def test_an_approval_from_the_page_runs_the_tool_and_the_session_goes_on(console: Console, home: Home) -> None:
    session_id = home.sessions["deploying1"]
    assert "Approve deploy?" in console.page(f"/sessions/{session_id}")
    csrf = console.csrf(session_id)
    done = console.request("POST", f"/sessions/{session_id}/approve", {"call_id": "dep1", "csrf": csrf})
    assert done.status == 303 and done.getheader("Location") == f"/sessions/{session_id}"
    assert _settled(home, "deploying1")
    (decided,) = [e for e in home.events("deploying1") if isinstance(e, ApprovalDecided)]
    assert decided.approved and decided.via == "zagent ui"
    assert (home.root.parent / "deployed.txt").read_text().split() == ["prod"]
    again = console.request("POST", f"/sessions/{session_id}/approve", {"call_id": "dep1", "csrf": csrf})
    assert again.getheader("Location") == f"/sessions/{session_id}"
    code, page = console.follow(again)
    assert code == 409 and "was already approved (zagent ui)" in page
    assert [e for e in home.events("deploying1") if isinstance(e, ApprovalDecided)] == [decided]


def test_an_answer_from_the_page_is_the_ask_user_calls_result(console: Console, home: Home) -> None:
    session_id = home.sessions["asking1"]
    page = console.page(f"/sessions/{session_id}")
    assert "Which colour should the button be?" in page and '<button name="answer" value="blue">' in page
    done = console.request("POST", f"/sessions/{session_id}/answer",
                           {"call_id": "ask1", "answer": "blue", "csrf": console.csrf(session_id)})
    assert done.status == 303
    assert _settled(home, "asking1")
    (answered,) = [e for e in home.events("asking1") if isinstance(e, InputAnswered)]
    assert answered.answer == "blue"


def _settled(home: Home, name: str) -> bool:
    """Whether the drive a decision started has ended its turn (its lease given back): what
    ``zagent sessions list`` says, asked until it says so (the drive runs in the console)."""
    from conftest import wait_for

    def idle() -> bool:
        listed = zagent(home.root, "sessions", "list", "--json").stdout
        return any(s["session_id"] == home.sessions[name] and s["status"] == "idle"
                   for s in json.loads(listed)["sessions"])

    wait_for(idle, f"session {name} to be idle", seconds=60)
    return any(isinstance(e, ToolCallFinished) for e in home.events(name))


def test_a_refused_answer_is_said_on_the_page_the_form_redirects_to_once(console: Console, home: Home) -> None:
    session_id = home.sessions["asking1"]
    empty = console.request("POST", f"/sessions/{session_id}/answer",
                            {"call_id": "ask1", "answer": " ", "csrf": console.csrf(session_id)})
    code, page = console.follow(empty)
    assert code == 409 and "The answer is empty: write one, or pick a choice." in page
    assert "The answer is empty" not in console.page(f"/sessions/{session_id}")  # said once
    # A message in a cookie the console did not sign (another service of this host can set one) is not shown.
    claim = base64.urlsafe_b64encode(json.dumps([session_id, "Forged words.", True]).encode()).decode()
    forged = console.request("GET", f"/sessions/{session_id}", said=f"{claim}.{'0' * 64}")
    assert forged.status == 200 and "Forged words." not in forged.read().decode()


def test_the_export_link_gives_the_lines_of_zagent_sessions_export(console: Console, home: Home,
                                                                  tmp_path: Path) -> None:
    session_id = home.sessions["priced"]
    written = tmp_path / "export.jsonl"
    assert zagent(home.root, "sessions", "export", session_id, "-o", str(written)).returncode == 0
    download = console.request("GET", f"/sessions/{session_id}/export")
    assert download.status == 200 and download.getheader("Content-Type", "").startswith("application/jsonl")
    assert download.getheader("Content-Disposition") == f'attachment; filename="{session_id}.jsonl"'
    assert download.read() == written.read_bytes()
    missing = console.request("GET", "/sessions/nope/export")
    assert missing.status == 404 and "No session" in missing.read().decode()


def test_a_fork_at_a_chosen_event_is_the_one_zagent_sessions_fork_makes(console: Console, home: Home) -> None:
    from zagent_core.journal.events import SessionForked

    session_id = home.sessions["looking"]
    with SQLiteJournal(home.root / "journal.db", read_only=True) as journal:
        fourth = list(journal.read(session_id))[3]
    csrf = console.csrf(session_id)
    made = console.request("POST", f"/sessions/{session_id}/fork", {"at": f"#{fourth.seq}", "csrf": csrf})
    new_id = (made.getheader("Location") or "").removeprefix("/sessions/")
    code, page = console.follow(made)
    assert code == 200 and f"Forked from session {session_id} at #{fourth.seq}" in page
    with SQLiteJournal(home.root / "journal.db", read_only=True) as journal:
        copied = [stored.event for stored in journal.read(new_id)]
    assert len(copied) == 5 and copied[-1] == SessionForked(parent_session_id=session_id, parent_seq=fourth.seq)
    words = console.request("POST", f"/sessions/{session_id}/fork", {"at": "yesterday", "csrf": csrf})
    code, page = console.follow(words)
    assert code == 409 and "Cannot fork at &quot;yesterday&quot;: give the number of an event" in page
    before = console.request("POST", f"/sessions/{session_id}/fork", {"at": "0", "csrf": csrf})
    code, page = console.follow(before)
    assert code == 409 and f"Not forked: session {session_id} has no event at or before #0." in page
    forged = console.request("POST", f"/sessions/{session_id}/fork", {"csrf": "0" * 64})
    assert forged.status == 403 and "CSRF" in forged.read().decode()


def test_a_session_page_streams_its_journal_head_as_events_are_appended(console: Console, home: Home) -> None:
    session_id = home.sessions["looking"]
    stream = console.request("GET", f"/sessions/{session_id}/events")
    assert stream.status == 200 and stream.getheader("Content-Type", "").startswith("text/event-stream")
    head = _next_head(stream)
    zagent(home.root, "run", "--session", session_id, "--detach", "one more thing")
    with SQLiteJournal(home.root / "journal.db") as journal:
        now = journal.head(session_id)
    assert now > head and _next_head(stream) == now
    stream.close()


def _next_head(stream: http.client.HTTPResponse) -> int:
    while True:
        line = stream.readline().decode()
        assert line, "the stream ended"
        if line.startswith("data: "):
            return int(line[6:])


def test_the_audit_page_has_the_numbers_of_zagent_audit(console: Console, home: Home) -> None:
    audited = json.loads(zagent(home.root, "audit", "--json").stdout)["calls"]
    page = console.page("/audit")
    assert f"<p>{len(audited)} calls" in page
    for call in audited:
        assert call["session_id"] in page
    deploys = json.loads(zagent(home.root, "audit", "--json", "--tool", "deploy").stdout)["calls"]
    assert f"<p>{len(deploys)} calls" in console.page("/audit?tool=deploy")
    asked = json.loads(zagent(home.root, "audit", "--json", "--asked").stdout)["calls"]
    assert f"<p>{len(asked)} calls" in console.page("/audit?status=asked")


def test_the_console_serves_a_postgresql_journal_and_decides_there(postgres_url: str, tmp_path: Path) -> None:
    root = tmp_path / "home"
    (root / "tools").mkdir(parents=True)
    python_tool(root, "deploy", DEPLOY, parameters=ENV, permission="ask")
    script = tmp_path / "deploying.json"
    script.write_text(json.dumps(DEPLOYING))
    ran = zagent(root, "--journal", postgres_url, "run", "--json", "--model", f"scripted:{script}", "deploy on pg")
    session_id = json.loads(ran.stdout)["session_id"]
    for console in serve(root, "--journal", postgres_url):
        assert session_id in console.page("/") and "deploy on pg" in console.page("/")
        done = console.request("POST", f"/sessions/{session_id}/approve",
                               {"call_id": "dep1", "csrf": console.csrf(session_id)})
        assert done.status == 303
        stream = console.request("GET", f"/sessions/{session_id}/events")
        while "Deployed." not in console.page(f"/sessions/{session_id}"):
            _next_head(stream)  # the page is read again each time the session's head moves
        stream.close()
        exported = zagent(root, "--journal", postgres_url, "sessions", "export", session_id).stdout
        assert console.request("GET", f"/sessions/{session_id}/export").read().decode() == exported
        forked = console.request("POST", f"/sessions/{session_id}/fork", {"csrf": console.csrf(session_id)})
        code, page = console.follow(forked)
        assert code == 200 and f"Forked from session {session_id} at #" in page and "Deployed." in page
    assert (tmp_path / "deployed.txt").read_text().split() == ["prod"]


def test_a_journal_that_fails_under_a_page_is_said_on_it(tmp_path: Path) -> None:
    import sqlite3

    made = Home(tmp_path / "home", {})
    (made.root / "tools").mkdir(parents=True)
    session_id = made.run("looking", LOOKING, "look")
    with sqlite3.connect(made.root / "journal.db") as raw:  # an event a newer zagent wrote
        version = raw.execute("SELECT max(version) FROM events WHERE session_id = ?", (session_id,)).fetchone()[0]
        raw.execute("INSERT INTO events (session_id, version, type, at, data) VALUES (?, ?, 'user_message', "
                    "'2026-01-01T00:00:00.000Z', '{\"v\": 99, \"text\": \"from the future\"}')",
                    (session_id, version + 1))
    for console in serve(made.root):
        failed = console.request("GET", f"/sessions/{session_id}?all=1")
        body = failed.read().decode()
        assert failed.status == 500 and "The journal failed" in body and "newer" in body, body


def test_sigterm_stops_the_console_with_a_page_following_a_session(home: Home) -> None:
    for console in serve(home.root):
        stream = console.request("GET", f"/sessions/{home.sessions['looking']}/events")
        _next_head(stream)
        console.process.terminate()
        _, err = console.process.communicate(timeout=30)  # the stream gets GRACEFUL_SECONDS to close
        assert console.process.returncode == 0 and "Traceback" not in err, err


#: A tool that says it started, then runs until it is stopped.
HANGING = """
import pathlib, time
pathlib.Path("hanging.txt").write_text("started")
time.sleep(600)
"""


def test_stopping_the_console_stops_the_drive_it_runs_and_the_session_stays_resumable(tmp_path: Path) -> None:
    from conftest import wait_for

    made = Home(tmp_path / "home", {})
    (made.root / "tools").mkdir(parents=True)
    python_tool(made.root, "hang", HANGING, permission="ask")
    session_id = made.run("hanging", [{"text": "Hanging.", "tool_calls": [{"id": "h1", "name": "hang",
                                                                           "arguments": {}}]}], "hang on")
    for console in serve(made.root):
        done = console.request("POST", f"/sessions/{session_id}/approve",
                               {"call_id": "h1", "csrf": console.csrf(session_id)})
        assert done.status == 303
        wait_for(lambda: (tmp_path / "hanging.txt").exists(), "the approved tool to start", seconds=60)
        console.process.terminate()
        _, err = console.process.communicate(timeout=60)
        assert console.process.returncode == 0 and "Traceback" not in err, err
    assert any(isinstance(event, ToolCallInterrupted) and event.call_id == "h1" for event in made.events("hanging"))
    listed = json.loads(zagent(made.root, "sessions", "list", "--json").stdout)["sessions"]
    assert [s["status"] for s in listed] == ["interrupted"]


def test_a_host_other_than_loopback_is_warned_about(home: Home) -> None:
    process = subprocess.Popen([sys.executable, "-m", "zagent_cli", "--home", str(home.root), "ui", "--port", "0",
                                "--host", "0.0.0.0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, text=True)
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().startswith("http://0.0.0.0:")
    process.terminate()
    _, err = process.communicate(timeout=30)
    assert err.startswith("warning: the console serves on 0.0.0.0, not only this machine")


def test_a_home_without_a_journal_is_said_in_a_line(tmp_path: Path) -> None:
    said = subprocess.run([sys.executable, "-m", "zagent_cli", "--home", str(tmp_path / "home"), "ui", "--port", "0"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    assert said.returncode == 2 and "no journal at" in said.stderr and "Traceback" not in said.stderr


def test_without_the_ui_extra_it_says_how_to_install_it(tmp_path: Path) -> None:
    from test_install_hints import env_with, hiding

    said = subprocess.run([sys.executable, "-m", "zagent_cli", "--home", str(tmp_path / "home"), "ui"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
                          env=env_with(hiding(tmp_path, "uvicorn")))
    assert said.returncode == 1 and "Traceback" not in said.stderr, said.stderr
    (line,) = said.stderr.splitlines()
    assert line.startswith("Error: zagent ui needs a web server and framework (uvicorn, starlette), which the ui "
                           "extra installs (uvicorn is missing): ") and line.endswith("[ui]'")


# -- in a real browser ---------------------------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")
#: Debian's chromium, headless, kept off the network but for the console.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: pip install -e "
                                                                   "'.[test]'")
    if not CHROMIUM.exists():
        pytest.skip("no chromium at /usr/bin/chromium: apt-get install chromium")
    with playwright.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def tab(browser: Browser, console: Console) -> Iterator[Page]:
    """A browser tab that opened the console's URL (its token now in the tab's cookie)."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    tab = context.new_page()
    tab.set_default_timeout(60_000)
    tab.goto(console.url)
    yield tab
    context.close()


def base(tab: Page) -> str:
    """The console's address, as the tab has it."""
    return "http://" + urlsplit(tab.url).netloc


def screenshot(tab: Page, tmp_path: Path, name: str) -> None:
    """The page's image; ``ZAGENT_UI_SCREENSHOTS=DIR`` copies it into DIR (docs/img refreshed)."""
    shot = tmp_path / f"{name}.png"
    tab.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 1000
    into = os.environ.get("ZAGENT_UI_SCREENSHOTS")
    if into:
        shutil.copy(shot, Path(into) / shot.name)


def test_the_list_in_a_browser(tab: Page, home: Home, tmp_path: Path) -> None:
    assert tab.url.endswith("/") and "token=" not in tab.url
    table = tab.locator("table.sessions")
    assert home.sessions["tree"] in table.inner_text() and "look <around>" in table.inner_text()
    screenshot(tab, tmp_path, "sessions")


def test_a_session_with_children_in_a_browser(tab: Page, home: Home, tmp_path: Path) -> None:
    tab.goto(f"{base(tab)}/sessions/{home.sessions['tree']}")
    assert "fan out" in tab.locator(".conversation").inner_text()
    assert tab.locator("svg.timeline g.bar").count() >= 2
    screenshot(tab, tmp_path, "session")
    tab.locator("table.facts a").first.click()
    tab.wait_for_selector(f'table.facts a[href="/sessions/{home.sessions["tree"]}"]')


def test_an_approval_granted_in_a_browser(tab: Page, home: Home, tmp_path: Path) -> None:
    tab.goto(f"{base(tab)}/sessions/{home.sessions['deploying2']}")
    screenshot(tab, tmp_path, "approval")
    tab.get_by_role("button", name="Approve").click()
    tab.wait_for_selector("text=Deployed.")
    assert not tab.locator(".pending").count()
    (decided,) = [e for e in home.events("deploying2") if isinstance(e, ApprovalDecided)]
    assert decided.approved
    assert any(isinstance(e, ToolCallFinished) and e.output.startswith("deployed to prod") for e in
               home.events("deploying2"))


def test_a_question_answered_in_a_browser(tab: Page, home: Home, tmp_path: Path) -> None:
    tab.goto(f"{base(tab)}/sessions/{home.sessions['asking2']}")
    screenshot(tab, tmp_path, "question")
    tab.get_by_label("answer").fill("teal, please")
    tab.get_by_role("button", name="Answer").click()
    tab.wait_for_selector("text=Going with it.")
    (answered,) = [e for e in home.events("asking2") if isinstance(e, InputAnswered)]
    assert answered.answer == "teal, please" and answered.via == "zagent ui"


def test_a_live_session_updates_without_a_reload(tab: Page, home: Home, tmp_path: Path) -> None:
    tab.goto(f"{base(tab)}/sessions/{home.sessions['live']}")
    tab.evaluate("window.notReloaded = true")
    zagent(home.root, "run", "--session", home.sessions["live"], "and again")
    tab.wait_for_selector("text=Second reply, drawn live.")
    assert tab.evaluate("window.notReloaded") is True


def test_the_audit_page_in_a_browser(tab: Page, tmp_path: Path) -> None:
    tab.goto(f"{base(tab)}/audit?tool=deploy")
    assert "deploy" in tab.locator("table.audit").inner_text()
    screenshot(tab, tmp_path, "audit")


def test_the_list_shows_what_each_session_cost_in_a_browser(tab: Page, home: Home) -> None:
    costs = json.loads(zagent(home.root, "sessions", "show", home.sessions["priced"], "--json").stdout)["costs"]
    # 1,200 tokens in at $1 a million, 120 out at $2: the catalog prices the priced session's model only.
    assert costs["session"]["cost_usd"] == 0.00144
    priced = tab.locator("table.sessions tr", has_text=home.sessions["priced"])
    assert priced.locator("td.cost").inner_text() == "$0.0014"
    assert priced.locator("td.num").first.inner_text() == "1,320"
    unpriced = tab.locator("table.sessions tr", has_text=home.sessions["looking"]).locator("td.cost")
    assert unpriced.inner_text() == "—" and "not priced in config.json's models" in (unpriced.get_attribute("title")
                                                                                     or "")


def test_thinking_is_folded_and_a_compaction_is_marked_where_it_happened(tab: Page, home: Home,
                                                                        tmp_path: Path) -> None:
    tab.goto(f"{base(tab)}/sessions/{home.sessions['priced']}")
    thought = tab.get_by_text("The user wants a <price>.")
    assert not thought.is_visible()
    screenshot(tab, tmp_path, "conversation")
    tab.locator("details.thinking summary").click()
    thought.wait_for()
    sections = tab.locator(".conversation > .section").all_inner_texts()
    marked = [number for number, text in enumerate(sections) if text.startswith("✂") or "context compacted" in text]
    (at,) = marked
    assert tab.locator(".section.compaction h3").inner_text().startswith("context compacted (manual)")
    # In place: after the reply it summarised, before the prompt that came after it.
    assert "Priced reply." in "".join(sections[:at]) and "go on" in "".join(sections[at:])
    assert "cost\t$0.0014: 1,200 tokens in, 120 out" in tab.locator("table.facts").inner_text()


def test_export_in_a_browser_downloads_what_zagent_sessions_export_writes(tab: Page, home: Home,
                                                                          tmp_path: Path) -> None:
    session_id = home.sessions["priced"]
    tab.goto(f"{base(tab)}/sessions/{session_id}")
    with tab.expect_download() as downloading:
        tab.get_by_role("link", name="Export").click()
    download = downloading.value
    assert download.suggested_filename == f"{session_id}.jsonl"
    exported = zagent(home.root, "sessions", "export", session_id).stdout
    assert Path(download.path()).read_text(encoding="utf-8") == exported


def test_fork_in_a_browser_opens_the_new_sessions_page(tab: Page, home: Home) -> None:
    session_id = home.sessions["priced"]
    tab.goto(f"{base(tab)}/sessions/{session_id}")
    tab.get_by_role("button", name="Fork").click()
    tab.wait_for_url(lambda url: session_id not in url)
    new_id = urlsplit(tab.url).path.removeprefix("/sessions/")
    assert tab.locator("h1").inner_text().startswith(f"Session {new_id}")
    assert tab.locator(".outcome").inner_text().startswith(f"Forked from session {session_id} at #")
    assert "After the summary." in tab.locator(".conversation").inner_text()
    listed = json.loads(zagent(home.root, "sessions", "list", "--json").stdout)["sessions"]
    assert new_id in [s["session_id"] for s in listed]


def test_reloading_the_page_after_a_decision_posts_nothing_again(tab: Page, browser: Browser, console: Console,
                                                                 home: Home) -> None:
    session_id = home.sessions["asking3"]
    # A second window on the question, answered in the first meanwhile: without scripts, so
    # it does not follow the session live and still shows the question.
    other = browser.new_context(java_script_enabled=False)
    stale = other.new_page()
    stale.goto(console.url)
    for opened in (tab, stale):
        opened.goto(f"{base(tab)}/sessions/{session_id}")
    tab.get_by_role("button", name="red").click()
    tab.wait_for_selector("text=Your answer was given (call ask1): the session goes on below.")
    assert tab.url == f"{base(tab)}/sessions/{session_id}"
    reloaded = tab.reload()
    assert reloaded is not None and (reloaded.status, reloaded.request.method) == (200, "GET")
    assert not tab.locator(".outcome").count()  # said once
    with stale.expect_navigation() as landing:
        stale.get_by_role("button", name="blue").click()
    refused = landing.value
    assert refused is not None and (refused.status, refused.request.method) == (409, "GET")
    assert "already answered" in stale.locator(".problem").inner_text()
    again = stale.reload()
    assert again is not None and (again.status, again.request.method) == (200, "GET")
    other.close()
    answers = [e for e in home.events("asking3") if isinstance(e, InputAnswered)]
    assert [answer.answer for answer in answers] == ["red"]


def test_a_fork_at_the_number_beside_a_reply_holds_the_session_up_to_it(tab: Page, home: Home) -> None:
    session_id = home.sessions["priced"]
    tab.goto(f"{base(tab)}/sessions/{session_id}")
    reply = tab.locator(".section.assistant", has_text="Priced reply.")
    number = reply.locator(".seq").inner_text()
    tab.get_by_label("fork at event").fill(number)
    tab.get_by_role("button", name="Fork").click()
    tab.wait_for_url(lambda url: session_id not in url)
    assert tab.locator(".outcome").inner_text().startswith(f"Forked from session {session_id} at {number}:")
    conversation = tab.locator(".conversation").inner_text()
    assert "Priced reply." in conversation and "After the summary." not in conversation
    assert not tab.locator(".section.compaction").count()
