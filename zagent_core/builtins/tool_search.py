"""The built-in ``tool_search`` tool: find deferred tools by words of their names and descriptions, and unlock them.

Under config.json's ``tools.disclosure: "lazy"`` a request leaves out the MCP servers' tools
(and the folder tools, with ``tools.lazy_folder_tools``). A call finds them, answers with
what they do and take, and stages ``tools_unlocked`` with its result: from the next request
on they are sent, after the other tools (see :mod:`zagent_core.tools.disclosure`). The unlocks are
journaled, so a resume and a replay send the same tools.
"""

from __future__ import annotations

from typing import Any

from zagent_core.config import Config
from zagent_core.journal.events import ToolsUnlocked
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext, Findable
from zagent_core.tools.results import ToolResult

NAME = "tool_search"
DEFAULT_LIMIT = 5
MAX_LIMIT = 20
MAX_QUERY_CHARS = 500
#: What an answer shows of each tool found: its description, each parameter's, and how many parameters.
MAX_DESCRIPTION_CHARS = 500
MAX_PARAMETER_DESCRIPTION_CHARS = 100
MAX_PARAMETERS_SHOWN = 30
#: How many names an answer that found nothing lists of the tools there are.
MAX_NAMES_LISTED = 50

DESCRIPTION = (
    "Find tools that are not loaded yet by words of their names or descriptions, and load them: the tools "
    "found can be called from your next reply on. A tool matches when any word of the query is in its name "
    "or description; best matches come first. \"select:NAME,NAME\" loads tools by their exact names. Call it "
    "when you need a tool you were not given."
)

def search_parameters(query: str, found: str, default_limit: int, max_limit: int) -> dict[str, Any]:
    """The parameters of a search built-in: ``query`` (described as ``query`` says) and how many ``found`` at most."""
    return {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS, "description": query},
            "limit": {"type": "integer", "minimum": 1, "maximum": max_limit,
                      "description": f"How many {found} to find at most (default {default_limit}, at most "
                                     f"{max_limit})."},
        },
        "required": ["query"],
        "additionalProperties": False,
    }


PARAMETERS = search_parameters("Words to look for in the tools' names and descriptions, such as \"github issue\".",
                               "tools", DEFAULT_LIMIT, MAX_LIMIT)


def matches(tools: list[Findable], query: str, limit: int) -> list[Findable]:
    """The tools any word of ``query`` is in (case aside), best first: a word in a tool's name
    counts twice a word in its description; ties keep the tools' order. ``select:A,B`` (Claude
    Code's form) names the tools themselves, in that order."""
    if query.startswith("select:"):
        by_name = {tool.shown_name: tool for tool in tools}
        wanted = dict.fromkeys(name.strip() for name in query.removeprefix("select:").split(","))
        return [by_name[name] for name in wanted if name in by_name][:limit]
    words = set(query.lower().split())
    scored: list[tuple[int, int, Findable]] = []
    for tool in tools:
        name, description = tool.shown_name.lower(), tool.description.lower()
        score = sum(2 * (word in name) + (word in description) for word in words)
        if score:
            scored.append((-score, len(scored), tool))
    return [tool for _, _, tool in sorted(scored)[:limit]]


def _cut(text: str, most: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[:most - 3] + "..."


def parameters_summary(schema: dict[str, Any]) -> str:
    """One line per parameter: its name, type, whether it is required, and what it is."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return "  parameters: none"
    listed = schema.get("required")
    required: list[Any] = listed if isinstance(listed, list) else []
    lines = ["  parameters:"]
    for name, spec in list(properties.items())[:MAX_PARAMETERS_SHOWN]:
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type", "any")
        kind = "|".join(map(str, kind)) if isinstance(kind, list) else str(kind)
        line = f"  - {name} ({kind}{', required' if name in required else ''})"
        if isinstance(spec.get("description"), str) and spec["description"].strip():
            line += ": " + _cut(spec["description"], MAX_PARAMETER_DESCRIPTION_CHARS)
        lines.append(line)
    if len(properties) > MAX_PARAMETERS_SHOWN:
        lines.append(f"  - and {len(properties) - MAX_PARAMETERS_SHOWN} more (the tool's schema, sent with it, has all)")
    return "\n".join(lines)


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Find the deferred tools the query names, answer what they are, and stage their unlocking."""
    tools = context.findable()
    if not tools:
        return ToolResult(output="No tool is waiting to be loaded: every tool you may call is loaded already.",
                          is_error=False)
    query = arguments["query"]
    found = matches(tools, query, int(arguments.get("limit", DEFAULT_LIMIT)))
    if not found:
        names = [tool.shown_name for tool in tools]
        more = f" and {len(names) - MAX_NAMES_LISTED} more" if len(names) > MAX_NAMES_LISTED else ""
        return ToolResult(output=f"No tool matches {query!r}. Tools not loaded yet: "
                                 f"{', '.join(names[:MAX_NAMES_LISTED])}{more}. Search again with other words.",
                          is_error=False)
    new = [tool.name for tool in found if not tool.unlocked]
    if new:
        context.staged.append(ToolsUnlocked(call_id=context.call_id, tools=new))
    shown = "\n\n".join(f"{tool.shown_name}: {_cut(tool.description, MAX_DESCRIPTION_CHARS)}\n"
                        f"{parameters_summary(tool.parameters)}" for tool in found)
    count = f"{len(found)} tool{'s' if len(found) > 1 else ''}"
    return ToolResult(output=f"Found {count}, loaded: you can call {'them' if len(found) > 1 else 'it'} from your "
                             f"next reply on.\n\n{shown}", is_error=False)


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=PARAMETERS, run=run,
    # It only reads the session's tools; the unlocks it stages are committed with its result.
    concurrency_safe=True, replay="safe", finds_deferred=True,
)


def for_config(config: Config) -> Builtin | None:
    """The tool under lazy disclosure; None under eager disclosure, where no tool is deferred."""
    return TOOL if config.tools.disclosure == "lazy" else None
