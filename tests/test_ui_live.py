"""The console's live pages (issue 28): a session's page and the list update as another process appends,
on SQLite (the heads polled) and on PostgreSQL (told by NOTIFY; the listening connection replaced when
it drops). A real ``zagent ui``, a real browser, a real PostgreSQL server; each test waits on what the
page shows, never for a while."""

from __future__ import annotations

import http.client
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import test_ui
from conftest import wait_for
from test_ask_user import zagent
from test_ui import Console, serve

from zagent_core.journal.protocol import Change

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

#: The fixture: Debian's chromium, driven by Playwright, for the module.
browser = test_ui.browser

#: Longer than any test: a change a page shows came told (NOTIFY), never polled.
NEVER = "3600"


@dataclass
class Home:
    root: Path
    journal: str

    def zagent(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The CLI on this home's journal, in a process of its own (another writer than the console)."""
        ran = zagent(self.root, "--journal", self.journal, *args)
        assert ran.returncode == 0, ran.stderr
        return ran

    def run(self, name: str, replies: list[str], prompt: str) -> str:
        """A new session of the scripted model, which has ``replies`` to give (one a turn): its id."""
        script = self.root.parent / f"{name}.json"
        script.write_text(json.dumps([{"text": reply} for reply in replies]))
        return str(json.loads(self.zagent("run", "--json", "--model", f"scripted:{script}", prompt).stdout)
                   ["session_id"])

    def serve(self) -> Iterator[Console]:
        return serve(self.root, "--journal", self.journal)


@pytest.fixture(params=["sqlite", "postgres"])
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Home:
    root = tmp_path / "home"
    (root / "tools").mkdir(parents=True)
    if request.param == "postgres":
        return Home(root, str(request.getfixturevalue("postgres_url")))
    return Home(root, f"sqlite:///{root / 'journal.db'}")


def opened(browser: Browser, console: Console, path: str) -> Page:
    """A tab that opened the console (its token in the tab's cookie), then ``path``, marked so that a
    reload would show (``window.notReloaded`` is gone after one)."""
    tab = browser.new_context(viewport={"width": 1280, "height": 860}).new_page()
    tab.set_default_timeout(60_000)
    tab.goto(console.url)
    tab.goto(console.url.split("/?")[0] + path)
    tab.evaluate("window.notReloaded = true")
    return tab


def following(tab: Page) -> None:
    """Wait until the tab's stream follows the journal (its first event came), so what is appended next
    is told to it, not drawn by its first load."""
    tab.wait_for_selector("html[data-live=following]", state="attached")


def first_row(tab: Page) -> str:
    return str(tab.locator("table.sessions tbody tr").first.inner_text())


def test_a_session_appended_to_by_another_process_updates_its_page_and_the_list(browser: Browser,
                                                                              home: Home) -> None:
    watched = home.run("watched", ["First reply.", "Second reply, drawn live."], "watch me")
    other = home.run("other", ["Other reply."], "the other one")
    for console in home.serve():
        session_tab = opened(browser, console, f"/sessions/{watched}")
        list_tab = opened(browser, console, "/")
        following(session_tab)
        following(list_tab)
        assert watched not in first_row(list_tab)  # the other session is the most recently active
        home.zagent("run", "--session", watched, "and again")
        session_tab.wait_for_selector("text=Second reply, drawn live.")
        list_tab.wait_for_function(f"() => document.querySelector('table.sessions tbody tr')"
                                   f".innerText.includes({json.dumps(watched)})")  # it came to the top
        new = home.run("new", ["New reply."], "a brand new session")
        list_tab.wait_for_selector("table.sessions tbody tr:first-child >> text=a brand new session")
        assert session_tab.evaluate("window.notReloaded") is True and list_tab.evaluate("window.notReloaded") is True
        assert new in first_row(list_tab) and other in list_tab.locator("table.sessions").inner_text()


def test_the_list_stream_names_the_sessions_that_moved(home: Home) -> None:
    session_id = home.run("moving", ["One.", "Two."], "move")
    for console in home.serve():
        stream = console.request("GET", "/events")
        assert stream.status == 200 and stream.getheader("Content-Type", "").startswith("text/event-stream")
        _line(stream, "event: following")
        home.zagent("run", "--session", session_id, "again")
        _line(stream, "event: moved")
        moved = json.loads(_line(stream, "data: ")[6:])
        assert moved == {"ids": [session_id], "all": False}
        stream.close()


def _line(stream: http.client.HTTPResponse, start: str) -> str:
    """The stream's next line that starts with ``start``."""
    while True:
        line = stream.readline().decode()
        assert line, "the stream ended"
        if line.startswith(start):
            return line.strip()


@pytest.fixture
def pg_home(home: Home) -> Home:
    if not home.journal.startswith("postgresql://"):
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    return home


def test_on_postgresql_pages_are_told_by_notify(browser: Browser, pg_home: Home,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    watched = pg_home.run("watched", ["First reply.", "Told by NOTIFY."], "watch me")
    monkeypatch.setenv("ZAGENT_UI_POLL_SECONDS", NEVER)  # the console's: a poll would come in an hour
    for console in pg_home.serve():
        session_tab = opened(browser, console, f"/sessions/{watched}")
        list_tab = opened(browser, console, "/")
        following(session_tab)
        following(list_tab)
        pg_home.zagent("run", "--session", watched, "and again")
        session_tab.wait_for_selector("text=Told by NOTIFY.")
        pg_home.run("new", ["New reply."], "told to the list")
        list_tab.wait_for_selector("table.sessions tbody tr:first-child >> text=told to the list")


def test_on_postgresql_a_killed_listening_connection_is_replaced_and_the_page_updates(
        browser: Browser, pg_home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg

    monkeypatch.setenv("ZAGENT_UI_POLL_SECONDS", NEVER)
    watched = pg_home.run("watched", ["First reply.", "After the kill."], "watch me")
    listeners = "SELECT pid FROM pg_stat_activity WHERE application_name = 'zagent changes'"
    with psycopg.connect(pg_home.journal, autocommit=True) as admin:
        for console in pg_home.serve():
            tab = opened(browser, console, f"/sessions/{watched}")
            following(tab)
            wait_for(lambda: admin.execute(listeners).fetchall(), "the console to listen", seconds=30)
            (killed,) = admin.execute(f"SELECT pg_terminate_backend(pid) FROM ({listeners}) AS l").fetchall()
            assert killed == (True,)
            pg_home.zagent("run", "--session", watched, "and again")  # its NOTIFY reaches no one
            tab.wait_for_selector("text=After the kill.")  # read from the journal once it listens again
            assert admin.execute(listeners).fetchall() and tab.evaluate("window.notReloaded") is True


def test_a_list_stream_keeps_a_bounded_number_of_sessions_then_says_all() -> None:
    from zagent_cli.ui.live import MOST_MOVED, Follower

    follower = Follower(None)
    for number in range(MOST_MOVED + 50):
        follower.tell(Change(f"s{number}", 1, number + 1))
    follower.tell(Change("s0", 2, 10_000))  # one already kept: its newest version, no more room taken
    moved, overflow = follower.taken()
    assert len(moved) == MOST_MOVED and overflow and follower.taken() == ([], False)


def test_a_session_stream_keeps_only_its_sessions_newest_version() -> None:
    from zagent_cli.ui.live import Follower

    follower = Follower("s")
    for version in range(1, 1000):
        follower.tell(Change("s", version, version))
    follower.tell(Change("s", 3, 2000))  # older than what it keeps: ignored
    assert follower.version == 999 and follower.woken.is_set()
