"""Agent loop overhead per turn, and whether it grows with the session: a trivial tool, beside raw subprocess.

Each turn is: the model asks for one tool call, the tool runs, the model answers. zagent's
side journals the user message, the turn, both replies, the call and the turn's end, and
builds each request from the conversation kept since the last one. The baseline runs the
same tool with ``subprocess.run`` once per turn.

The model is scripted (no wire) or, with ``--model openai``, an OpenAI-compatible endpoint
on 127.0.0.1 in this process, so every request is built, serialised and sent as to a real
provider (the endpoint answers by counting the replies in the request, without parsing it).
The table shows the overhead per turn over the first 20 turns and over the last 20: flat
means the second is not larger than the first. With ``openai``, the time to build each
request body (``encoded``: each message serialised once, when it is first sent) is shown
beside serialising the same request from scratch (``json.dumps(request())``, as before).

    python bench/agent_loop.py [-n 100] [--model scripted|openai] [--synchronous FULL|NORMAL]
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
from typing import Any

from resume_scale import ModelServer  # the loopback endpoint (bench/resume_scale.py)

from zagent_core import Engine, Home
from zagent_core.agent.loop import Agent
from zagent_core.agent.models import Model, ModelReply, ToolCallRequest
from zagent_core.agent.models.openai import OpenAIModel
from zagent_core.agent.models.scripted import ScriptedModel
from zagent_core.config import AgentConfig
from zagent_store import SQLiteJournal

TOOL = "import json, sys\nprint(json.load(sys.stdin)['name'])\n"
WINDOW = 20


def endpoint_reply(body: bytes) -> tuple[dict[str, Any], str]:
    """Request *k* (k replies in it, counted without parsing the body) asks for a call if k is even,
    else ends the turn."""
    replies = body.count(b'"role": "assistant"')
    if replies % 2:
        return {"role": "assistant", "content": "done"}, "stop"
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"c{replies}", "type": "function", "function": {"name": "hello", "arguments": '{"name": "world"}'}}]}, \
        "tool_calls"


class TimedOpenAI(OpenAIModel):
    """:class:`OpenAIModel`, noting how long each request body took to build, and how long the same
    request took to serialise from scratch (measured after, outside the turn's time)."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.built: list[float] = []
        self.scratch: list[tuple[list[Any], list[Any]]] = []

    def encoded(self, messages: list[Any], tools: list[Any], *, stream: bool = False) -> bytes:
        start = time.perf_counter()
        body = super().encoded(messages, tools, stream=stream)
        self.built.append(time.perf_counter() - start)
        self.scratch.append((list(messages), tools))
        return body

    def from_scratch(self, index: int) -> float:
        messages, tools = self.scratch[index]
        start = time.perf_counter()
        json.dumps(self.request(messages, tools, stream=self.config.stream)).encode()
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=100, help="turns of each (default 100)")
    parser.add_argument("--model", choices=("scripted", "openai"), default="scripted")
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="FULL")
    args = parser.parse_args()
    turns = args.n + 3
    endpoint = ModelServer(endpoint_reply) if args.model == "openai" else None
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        folder = home / "tools" / "hello"
        folder.mkdir(parents=True)
        (folder / "tool.py").write_text(TOOL)
        (folder / "hello.json").write_text(json.dumps({
            "description": "say a name", "command": [sys.executable, "tool.py"],
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}))
        argv, stdin = [sys.executable, str(folder / "tool.py")], b'{"name": "world"}'
        with SQLiteJournal(home / "journal.db", synchronous=args.synchronous) as journal:
            engine = Engine(Home(home), journal, workspace=tmp)
            session = engine.start_session("bench")
            model: Model
            if endpoint is not None:
                model = TimedOpenAI("x", base_url=endpoint.url, api_key="bench")
            else:
                model = ScriptedModel([reply for turn in range(turns) for reply in (
                    ModelReply(tool_calls=[ToolCallRequest(id=f"c{turn}", name="hello", arguments={"name": "world"})],
                               stop_reason="tool_use"), ModelReply(text="done"))])
            agent = Agent(session, model, AgentConfig(max_turns=10 * args.n))
            ours, raw = [], []
            for _ in range(turns):
                started = time.perf_counter()
                agent.turn("say hello")
                ours.append(time.perf_counter() - started)
                started = time.perf_counter()
                subprocess.run(argv, input=stdin, capture_output=True, check=True)
                raw.append(time.perf_counter() - started)
            ours, raw = ours[3:], raw[3:]  # warm-up
            events = sum(1 for _ in journal.read(session.session_id))
    if endpoint is not None:
        endpoint.close()
    print(f"agent loop, {args.n} turns (one tool call each, {args.model} model, {args.synchronous}), "
          f"{events} events journaled")
    print(f"{'':36}{'zagent turn':>12}{'raw tool':>10}{'overhead':>10}  ms, medians")
    overheads = []
    for label, part in ((f"turns 1-{WINDOW}", slice(0, WINDOW)), (f"turns {args.n - WINDOW + 1}-{args.n}",
                                                                    slice(-WINDOW, None))):
        z, r = statistics.median(ours[part]) * 1000, statistics.median(raw[part]) * 1000
        overheads.append(z - r)
        print(f"{label:36}{z:>12.2f}{r:>10.2f}{z - r:>10.2f}")
    z, r = statistics.median(ours) * 1000, statistics.median(raw) * 1000
    print(f"{'all turns':36}{z:>12.2f}{r:>10.2f}{z - r:>10.2f}   ({z / r:.2f}x)")
    print(f"overhead of the last {WINDOW} turns / the first {WINDOW}: {overheads[1] / overheads[0]:.2f}x")
    if isinstance(model, TimedOpenAI):
        requests = len(model.built)
        print(f"\nrequest body, {requests} requests{'':12}{'built':>10}{'from scratch':>14}  ms, medians")
        for label, part in ((f"requests 1-{2 * WINDOW}", range(6, 6 + 2 * WINDOW)),
                            (f"requests {requests - 2 * WINDOW + 1}-{requests}", range(requests - 2 * WINDOW, requests))):
            built = statistics.median(model.built[i] for i in part) * 1000
            scratch = statistics.median(model.from_scratch(i) for i in part) * 1000
            print(f"{label:36}{built:>10.3f}{scratch:>14.3f}")


if __name__ == "__main__":
    main()
