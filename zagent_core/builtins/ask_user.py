"""The built-in ``ask_user`` tool: a question to a person, as a wait that survives a crash.

The question is journaled (``input_requested``) before anyone is asked. On a terminal the
run asks there and the answer is the call's result at once; elsewhere (a script, CI, a
server) the call stays open without a result, the turn ends ``waiting_on_user`` and the
session waits for ``zagent answer SESSION TEXT``, which journals the answer and the call's
result in one transaction, exactly once.
"""

from __future__ import annotations

from typing import Any

from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.results import ToolResult

MAX_QUESTION = 4000
MAX_CHOICES = 10

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "minLength": 1, "maxLength": MAX_QUESTION,
                     "description": "What to ask the user, in full: they may not have followed the conversation."},
        "choices": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 200},
                    "minItems": 2, "maxItems": MAX_CHOICES, "uniqueItems": True,
                    "description": "The answers to offer, if the question has a few; the user may still answer "
                                   "in their own words."},
    },
    "required": ["question"],
    "additionalProperties": False,
}


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    question: str = arguments["question"]
    if not question.strip():
        return ToolResult(output='nothing asked: "question" is blank; write the question to ask', is_error=True)
    answer = context.host.ask_user(context, question, arguments.get("choices"))
    return ToolResult(output=answer, is_error=False)


TOOL = Builtin(
    name="ask_user",
    description=("Ask the user a question and wait for the answer, which is this call's result. Use it when you "
                 "cannot go on without a decision or a fact only the user has; the answer may take hours."),
    parameters=PARAMETERS, run=run,
    # A question journaled is never asked again: a call cut off before its question was
    # journaled asked no one, so running it again asks once.
    replay="safe",
    # A sub-agent has no person to ask: its parent does the asking.
    offered=lambda config, depth: depth == 0, served_in_replay=True,
)
