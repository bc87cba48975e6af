"""The built-in ``spawn`` tool: a sub-agent, as a child session the call waits on.

The child is a session of the same journal with its own conversation, read-state and
tasks; its parent journals ``child_spawned`` before the child's session exists and
``child_ended`` with the call's result. A crash in between loses nothing: resume drives
the same child on (:attr:`Builtin.continues`), so no child runs twice and the call gets
the child's real result. What a child may use, and the limits, come from ``spawn`` in
``config.json``; the session does the work (:meth:`Host.spawn`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from zagent_core.builtins import model_search
from zagent_core.config import THINKING_BUDGETS, Config
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.model_catalog import EMBEDDED_CATALOG_MAX, model_line, offered
from zagent_core.tools.results import ToolResult

NAME = "spawn"
MAX_TASK = 100_000

DESCRIPTION = (
    "Give a task to a sub-agent: a fresh agent with its own conversation that works on it with the tools it "
    "is given and answers with its final reply, which is this call's result (with its status and what it "
    "took). Use it for independent pieces of work, several at once in one reply when they do not depend on "
    "each other; write the task in full, the sub-agent has not seen this conversation. A stopped sub-agent "
    "can be given a follow-up with resume and its label (child-1, ...)."
)


def parameters(config: Config) -> dict[str, Any]:
    """The parameters, with the presets and the model catalog of ``config`` offered by name."""
    properties: dict[str, Any] = {
        "task": {"type": "string", "minLength": 1, "maxLength": MAX_TASK,
                 "description": "What the sub-agent is to do, in full, and what to answer with."},
        "system": {"type": "string", "maxLength": MAX_TASK,
                   "description": "A system prompt for the sub-agent, instead of its preset's or the default."},
        "resume": {"type": "string", "pattern": "^child-[0-9]+$",
                   "description": "The label of a sub-agent of this session that stopped (child-1, ...): it goes "
                                  "on with its own conversation, and task is its new instruction."},
    }
    presets = config.spawn.subagents
    if presets:
        listing = "; ".join(f"{name}: {preset.description}" if preset.description else name
                            for name, preset in presets.items())
        properties["subagent_type"] = {"type": "string",
                                       "description": f"A preset for the sub-agent ({listing}); another "
                                                      "name runs a general-purpose one."}
    properties["thinking"] = {
        "anyOf": [{"type": "string", "enum": list(THINKING_BUDGETS)}, {"type": "integer", "minimum": 1024}],
        "description": f"How much the sub-agent thinks before it answers: a level or a budget of tokens, at most "
                       f"{config.model.thinking!r} (default: {config.model.thinking!r})."}
    models = offered(config)
    if len(models) > EMBEDDED_CATALOG_MAX:
        properties["model"] = {"type": "string",
                               "description": f"The id of the model the sub-agent runs on (default: the one "
                                              f"running you): {len(models)} models are offered; find their ids, "
                                              f"prices and windows with the {model_search.NAME} tool."}
    elif models:
        listing = "\n".join(f"- {model_line(entry)}" for entry in models)
        properties["model"] = {"type": "string",
                               "description": "The id of the model the sub-agent runs on (default: the one running "
                                              f"you); prices are US dollars per million tokens:\n{listing}"}
    return {"type": "object", "properties": properties, "required": ["task"], "additionalProperties": False}


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    if not arguments["task"].strip():
        return ToolResult(output='nothing spawned: "task" is blank; write the task for the sub-agent', is_error=True)
    return context.host.spawn(context, arguments)


def _offered(config: Config, depth: int) -> bool:
    return depth < config.spawn.max_depth


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=parameters(Config()), run=run,
    # Children of one reply run at once (spawn.max_concurrent bounds them).
    concurrency_safe=True,
    # Running it again after a crash goes on with the same child: it never starts a second one.
    replay="safe", continues=True, offered=_offered, served_in_replay=True,
)


def for_config(config: Config) -> Builtin | None:
    """The tool as ``config`` sets it up: its presets and models offered; None when
    ``spawn.max_depth`` is 0 (spawn is off)."""
    if config.spawn.max_depth == 0:
        return None
    return dataclasses.replace(TOOL, parameters=parameters(config))
