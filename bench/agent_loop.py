"""Agent loop overhead per turn: a scripted model and a trivial tool, beside raw subprocess.

Each turn is: the model (scripted: free) asks for one tool call, the tool runs, the model
answers. zagent's side journals the user message, the turn, both replies, the call and
the turn's end, and rebuilds the conversation from the journal before each request. The
baseline runs the same tool with ``subprocess.run`` once per turn.

    python bench/agent_loop.py [-n 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.config import AgentConfig
from zagent_core.agent.models import ModelReply, ToolCallRequest
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_store import SQLiteJournal

TOOL = "import json, sys\nprint(json.load(sys.stdin)['name'])\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=100, help="turns of each")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        folder = home / "tools" / "hello"
        folder.mkdir(parents=True)
        (folder / "tool.py").write_text(TOOL)
        (folder / "hello.json").write_text(json.dumps({
            "description": "say a name", "command": [sys.executable, "tool.py"],
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}))
        argv, stdin = [sys.executable, str(folder / "tool.py")], b'{"name": "world"}'
        with SQLiteJournal(home / "journal.db") as journal:
            engine = Engine(Home(home), journal, workspace=tmp)
            session = engine.start_session("bench")
            replies = []
            for turn in range(args.n + 3):
                replies += [ModelReply(tool_calls=[ToolCallRequest(id=f"c{turn}", name="hello",
                                                                   arguments={"name": "world"})], stop_reason="tool_use"),
                            ModelReply(text="done")]
            agent = Agent(session, ScriptedModel(replies), AgentConfig(max_turns=10 * args.n))
            ours, raw = [], []
            for turn in range(args.n + 3):
                started = time.perf_counter()
                agent.turn("say hello")
                ours.append(time.perf_counter() - started)
                started = time.perf_counter()
                subprocess.run(argv, input=stdin, capture_output=True, check=True)
                raw.append(time.perf_counter() - started)
            ours, raw = ours[3:], raw[3:]  # warm-up
            events = sum(1 for _ in journal.read(session.session_id))
    z, r = statistics.median(ours) * 1000, statistics.median(raw) * 1000
    print(f"agent loop, {args.n} turns (one tool call each, scripted model), {events} events journaled")
    print(f"{'':32}{'median ms':>10}")
    print(f"{'zagent turn':32}{z:>10.2f}")
    print(f"{'raw subprocess.run of the tool':32}{r:>10.2f}")
    print(f"{'overhead per turn':32}{z - r:>10.2f}   ({z / r:.2f}x)")


if __name__ == "__main__":
    main()
