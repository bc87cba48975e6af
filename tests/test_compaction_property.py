"""Every request is bounded (issue 22): whatever a session's tools give back, no request the
engine builds exceeds ``window x compact_at`` plus one capped result, and a summary request
fits in the window. A property over sessions hypothesis makes up, on a real engine."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from zagent_core import Engine, Home
from zagent_core.agent.compaction import COMPACTION_PROMPT, specs_size
from zagent_core.agent.conversation import _size, tokens
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import Message, ModelReply, ToolCallRequest, ToolSpec
from zagent_core.config import AgentConfig, BuiltinsConfig, Config, LimitsConfig, ModelConfig
from zagent_core.journal.events import ContextCompacted
from zagent_store import SQLiteJournal

WINDOW, COMPACT_AT, CAP = 4096, 0.5, 2048
SIZES = (0, 10, 500, 1500, 4000, 20_000)


class Planned:
    """A model that makes the calls of its plan in order (each reply: read these files), answers
    a summary request with a summary of the size asked, and ends the turn when the plan is done."""

    name = "planned"

    def __init__(self, plan: list[list[int]], summary_size: int) -> None:
        self.plan = list(plan)
        self.summary_size = summary_size
        self.requests: list[tuple[bool, int]] = []  # (a summary request?, its size in tokens)
        self.calls = 0

    def reply(self, messages: list[Message], tools: list[ToolSpec], **_: Any) -> ModelReply:
        summary = messages[-1].content == COMPACTION_PROMPT
        self.requests.append((summary, tokens(sum(_size(m) for m in messages) + specs_size(tools))))
        if summary:
            return ModelReply(text="S" * self.summary_size)
        if not self.plan:
            return ModelReply(text="done")
        reads = self.plan.pop(0)
        self.calls += len(reads)
        return ModelReply(stop_reason="tool_use", tool_calls=[
            ToolCallRequest(id=f"c{self.calls}_{n}", name="read_file", arguments={"path": f"f{size}.txt"})
            for n, size in enumerate(reads)])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=st.lists(st.lists(st.sampled_from(SIZES), min_size=1, max_size=3), min_size=1, max_size=12),
       summary_size=st.sampled_from([1, 200, 1500]), keep=st.integers(0, 3))
@example(plan=[[20_000]], summary_size=1, keep=1)  # one result larger than the window: cut in the summary request
def test_no_request_exceeds_the_budget_plus_one_capped_result(plan: list[list[int]], summary_size: int,
                                                              keep: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for size in SIZES:
            (root / f"f{size}.txt").write_text("".join(f"line {n:06d}\n" for n in range(size // 12 + 1))[:size])
        config = Config(model=ModelConfig(context_window=WINDOW), limits=LimitsConfig(output_cap_bytes=CAP),
                        agent=AgentConfig(compact_at=COMPACT_AT, keep_results_of_requests=keep, max_turns=200),
                        builtins=BuiltinsConfig(enabled=["read_file"]))
        model = Planned(plan, summary_size)
        with SQLiteJournal(root / "journal.db") as journal:
            engine = Engine(Home(root / "home"), journal, workspace=root, config=config)
            session = engine.start_session("run")
            result = Agent(session, model).run("read the files")
            compactions = [e.event for e in journal.read(session.session_id) if isinstance(e.event, ContextCompacted)]
            session.release()
    assert result.reason == "idle"
    # One capped result: the cap, the marker around it, and what the message's framing adds.
    bound = int(WINDOW * COMPACT_AT) + tokens(CAP + 400)
    for summary, size in model.requests:
        assert size <= (WINDOW if summary else bound), (summary, size, model.requests)
    assert len(compactions) == sum(summary for summary, _ in model.requests)
    assert all(json.dumps(c.model_dump()).count("S" * summary_size) == 1 for c in compactions)
