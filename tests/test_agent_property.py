"""Property: whatever event a crash stops the journal at, resume settles it and the agent
goes on without ever sending the model a tool call that has no result.

Each example runs a real agent session (scripted model, real tools), then replays a
prefix of its journal into a fresh journal, as a SIGKILL after that event would leave it,
resumes that, and lets the agent finish.
"""

from __future__ import annotations

from pathlib import Path

from conftest import python_tool
from crashcheck import check_invariants
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.config import AgentConfig, Config, LimitsConfig
from zagent_core.agent.models import ModelReply, ToolCallRequest
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_store import SQLiteJournal

CALLS = {
    "ok": ("echo", {"say": "hi"}),
    "invalid": ("echo", {"sey": "hi"}),
    "unknown": ("nope", {}),
    "background": ("bg", {}),
    "terminal": ("terminal", {"action": "list"}),
}
CONFIG = Config(limits=LimitsConfig(kill_grace_seconds=0.2), agent=AgentConfig(max_background_wait_minutes=0.2))


def install(home: Path) -> None:
    schema = {"type": "object", "properties": {"say": {"type": "string"}}, "required": ["say"],
              "additionalProperties": False}
    python_tool(home, "echo", "import json, os, sys\nopen(os.environ['ZAGENT_NOTIFY_FILE'], 'a').write('echoing\\n')\n"
                "print(json.load(sys.stdin)['say'])", parameters=schema)
    python_tool(home, "bg", "import os, time\nopen(os.environ['ZAGENT_NOTIFY_FILE'], 'a').write('bg note\\n')\n"
                "time.sleep(0.1)\nprint('bg done')", background=True)


def model_for(plan: list[list[str]], prefix: str = "c") -> ScriptedModel:
    replies = [ModelReply(tool_calls=[ToolCallRequest(id=f"{prefix}{turn}_{i}", name=CALLS[kind][0],
                                                      arguments=CALLS[kind][1])
                                      for i, kind in enumerate(kinds)], stop_reason="tool_use")
               for turn, kinds in enumerate(plan)]
    # Enough plain answers for every turn a crash and its wake-ups may add.
    return ScriptedModel(replies + [ModelReply(text=f"answer {n}") for n in range(12)])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(st.lists(st.sampled_from(sorted(CALLS)), min_size=1, max_size=3), min_size=1, max_size=3),
       data=st.data())
def test_resume_after_a_crash_at_any_event_never_sends_an_orphaned_call(tmp_path_factory, plan, data) -> None:
    root = tmp_path_factory.mktemp("prop")
    home = root / "home"
    install(home)
    with SQLiteJournal(root / "original.db") as original:
        engine = Engine(Home(home), original, workspace=root, config=CONFIG)
        session = engine.start_session("run")
        Agent(session, model_for(plan)).run("go")
        for task in session.state.running_tasks:
            session.wait_task(task.task_id, 10)
        events = list(original.read(session.session_id))
    # A share of the journal, not a count: how many events a run makes depends on timing
    # (notes, wake-ups), and hypothesis needs the same draw to mean the same thing.
    share = data.draw(st.integers(min_value=0, max_value=1000), label="share of events kept (per mille)")
    cut = 1 + share * (len(events) - 1) // 1000

    with SQLiteJournal(root / "crashed.db") as crashed:
        for stored in events[:cut]:  # one event per append: any prefix is a state a crash can leave
            crashed.append(session.session_id, [stored.event], stored.version - 1)
        engine = Engine(Home(home), crashed, workspace=root, config=CONFIG)
        resumed = engine.resume(session.session_id)
        # Its own call ids: the original run's call folders (with what its tools wrote) are in
        # the same home, and a call the crash kept from being asked must not reuse one of them.
        Agent(resumed, model_for(plan, prefix="r")).run(None)  # raises OrphanedCallError on an orphan
        for task in resumed.state.running_tasks:
            resumed.wait_task(task.task_id, 10)
        resumed.deliver()
        resumed.end()
        check_invariants(list(crashed.read(session.session_id)))
