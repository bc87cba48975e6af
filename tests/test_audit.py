"""The audit surface: SQL views over the journal and `zagent audit`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import python_tool, sql

from zagent_cli.main import cli
from zagent_core import Engine

# The store's promises hold for the engine on each of them: run on SQLite and PostgreSQL.
pytestmark = pytest.mark.stores


def run_calls(home_dir: Path, engine: Engine) -> str:
    python_tool(home_dir, "fast", "print('fast result')",
                parameters={"type": "object", "properties": {"n": {"type": "integer"}}})
    python_tool(home_dir, "slow", "import time\ntime.sleep(0.3)\nprint('slow result')")
    python_tool(home_dir, "broken", "import sys\nsys.exit('it broke')")
    python_tool(home_dir, "bg", "print('background result')", background=True)
    with engine.start_session("test") as session:
        session.call("fast", {"n": 1})
        session.call("fast", {"n": "x"})
        session.call("slow", {})
        session.call("broken", {})
        session.call("bg", {})
        session.wait_task("1", 10)
        session.call("slow", {}, call_id="call_second_slow")
    return session.session_id


def test_the_views_answer_what_the_tools_did(home_dir: Path, engine: Engine, journal_url: str) -> None:
    session_id = run_calls(home_dir, engine)
    calls = sql(journal_url, "SELECT * FROM tool_calls ORDER BY requested_at")
    assert [(c["tool"], c["status"], c["is_error"]) for c in calls] == [
        ("fast", "finished", 0), ("fast", "rejected", None), ("slow", "finished", 0), ("broken", "finished", 1),
        ("bg", "finished", 0), ("slow", "finished", 0)]
    assert json.loads(calls[0]["arguments"]) == {"n": 1}
    assert calls[2]["duration_ms"] >= 300 and calls[3]["exit_code"] == 1 and "it broke" in calls[3]["output_head"]
    assert calls[4]["task_id"] == "1"
    (task,) = sql(journal_url, "SELECT * FROM tasks")
    assert (task["tool"], task["status"], task["exit_code"]) == ("bg", "exited", 0)
    (summary,) = sql(journal_url, "SELECT * FROM sessions")
    assert summary["session_id"] == session_id and summary["calls"] == 6 and summary["status"] == "ended"


def test_zagent_audit_filters(home_dir: Path, engine: Engine) -> None:
    session_id = run_calls(home_dir, engine)

    def audit(*args: str) -> list[dict]:
        result = CliRunner().invoke(cli, ["--home", str(home_dir), "audit", "--json", *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)["calls"]

    assert len(audit()) == 6
    assert {c["tool"] for c in audit("--tool", "slow")} == {"slow"}
    assert [c["tool"] for c in audit("--errors")] == ["fast", "broken"]
    assert [c["tool"] for c in audit("--slowest", "2")] == ["slow", "slow"]
    unknown = CliRunner().invoke(cli, ["--home", str(home_dir), "audit", "--session", "nope"])
    assert unknown.exit_code == 2 and 'no session "nope" in the journal' in unknown.output
    assert len(audit("--session", session_id.rsplit("-", 1)[1])) == 6  # the random end of its id names it
    assert len(audit("--session", session_id, "--since", "1h")) == 6
    assert audit("--since", "2999-01-01") == []
    assert len(audit("--limit", "2")) == 2
    text = CliRunner().invoke(cli, ["--home", str(home_dir), "audit", "--tool", "broken"]).output
    assert "broken" in text and "error" in text and "it broke" in text
    bad = CliRunner().invoke(cli, ["--home", str(home_dir), "audit", "--since", "yesterday"])
    assert bad.exit_code == 2 and "use a date or time" in bad.output


def test_the_tool_index_serves_audit_by_tool(home_dir: Path, engine: Engine, journal_url: str, store: str) -> None:
    run_calls(home_dir, engine)
    if store == "sqlite":
        plan = " ".join(row["detail"] for row in sql(journal_url, "EXPLAIN QUERY PLAN SELECT * FROM tool_calls"
                                                                  " WHERE tool = 'slow'"))
    else:  # a table this small is scanned unless scans are priced out: the index must be usable
        import psycopg

        with psycopg.connect(journal_url) as db:
            db.execute("SET enable_seqscan = off")
            plan = " ".join(row[0] for row in db.execute("EXPLAIN SELECT * FROM tool_calls WHERE tool = 'slow'"))
    assert "events_tool" in plan


def test_a_background_task_that_failed_is_an_error_in_the_audit(home_dir: Path, engine: Engine,
                                                                 journal_url: str) -> None:
    python_tool(home_dir, "bgfail", "import json, time\ntime.sleep(0.2)\n"
                "print(json.dumps({'output': '(4 words)', 'is_error': True}))", background=True, output="json")
    python_tool(home_dir, "bgok", "print('all fine')", background=True)
    with engine.start_session("test") as session:
        session.call("bgfail", {})
        session.wait_task("1", 10)
        session.call("bgok", {})
        session.wait_task("2", 10)
    failed, fine = sql(journal_url, "SELECT * FROM tasks ORDER BY task_id")
    assert (failed["status"], failed["exit_code"], failed["is_error"], failed["output_head"]) == (
        "exited", 0, 1, "(4 words)")
    assert failed["duration_ms"] >= 200 and fine["is_error"] == 0 and fine["output_head"].strip() == "all fine"
    calls = {r["tool"]: r for r in sql(journal_url, "SELECT * FROM tool_calls")}
    # The call's row says what its task did, not "started as task #1".
    assert (calls["bgfail"]["status"], calls["bgfail"]["is_error"], calls["bgfail"]["output_head"]) == (
        "finished", 1, "(4 words)")
    assert calls["bgfail"]["duration_ms"] >= 200 and calls["bgok"]["is_error"] == 0
    result = CliRunner().invoke(cli, ["--home", str(home_dir), "audit", "--errors", "--json"])
    assert [c["tool"] for c in json.loads(result.output)["calls"]] == ["bgfail"]
    slowest = CliRunner().invoke(cli, ["--home", str(home_dir), "audit", "--slowest", "1", "--json"])
    assert [c["tool"] for c in json.loads(slowest.output)["calls"]] == ["bgfail"]


def test_a_background_call_is_running_while_its_task_runs(home_dir: Path, engine: Engine, journal_url: str) -> None:
    # Waits until killed: stdin is no wait (it holds the arguments, then ends), and a supervisor
    # that starts in 50 ms let such a tool finish before the kill.
    python_tool(home_dir, "waits", "import time\ntime.sleep(60)", background=True)
    with engine.start_session("test") as session:
        session.call("waits", {})
        assert [row["status"] for row in sql(journal_url, "SELECT status FROM tool_calls")] == ["running"]
        assert sql(journal_url, "SELECT status, is_error, duration_ms FROM tasks") == [
            {"status": "running", "is_error": None, "duration_ms": None}]
        session.kill_task("1")
    assert sql(journal_url, "SELECT status FROM tool_calls") == [{"status": "killed"}]


@pytest.mark.parametrize(("schema", "view", "added"), [
    (3, "tasks", {"is_error", "duration_ms", "output_head"}),  # the task outcome views
    (5, "decisions", {"kind", "asked", "decision", "answer", "reason", "via"}),  # people in the loop
])
def test_an_older_journal_gets_the_newer_views(home_dir: Path, schema: int, view: str, added: set[str]) -> None:
    import sqlite_utils

    from zagent_store.sqlite import MIGRATIONS, SQLiteJournal

    path = home_dir / "journal.db"
    db = sqlite_utils.Database(path)
    for migration in MIGRATIONS[:schema]:
        migration(db)
    db.execute(f"PRAGMA user_version = {schema}")
    db.conn.commit()
    db.close()
    with SQLiteJournal(path) as journal:
        columns = [row[1] for row in journal.db.execute(f"PRAGMA table_info({view})")]
    assert added <= set(columns)
