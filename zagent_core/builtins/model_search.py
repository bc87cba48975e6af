"""The built-in ``model_search`` tool: find the models a ``spawn`` call may pick, by words of
their ids, specs and descriptions.

It is offered when the catalog (config.json's ``models``, as ``spawn.models`` offers them) has
more than :data:`~zagent_core.tools.model_catalog.EMBEDDED_CATALOG_MAX` models: spawn's schema then lists
none, since a large catalog in every request would cost its tokens each time. Each model is
shown in the one line spawn's schema shows it in (:func:`~zagent_core.tools.model_catalog.model_line`).
"""

from __future__ import annotations

from zagent_core.builtins.tool_search import search_parameters
from zagent_core.config import Config
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext
from zagent_core.tools.model_catalog import EMBEDDED_CATALOG_MAX, model_line, offered, search
from zagent_core.tools.results import ToolResult

NAME = "model_search"
DEFAULT_LIMIT = 10
MAX_LIMIT = 50
#: How many ids an answer that found nothing lists of the models there are.
MAX_IDS_LISTED = 50

DESCRIPTION = (
    "Find the models a sub-agent can run on (spawn's model), by words of their ids, providers or descriptions "
    "(\"cheap\", \"reasoning\", \"anthropic\"): each in a line with its id, provider, price per million tokens, "
    "context window and whether it reasons. \"*\" lists them all, up to limit."
)

PARAMETERS = search_parameters("Words to look for in the models' ids, specs and descriptions, or \"*\".", "models",
                               DEFAULT_LIMIT, MAX_LIMIT)


def _answer(config: Config, query: str, limit: int) -> str:
    models = offered(config)
    if not models:
        return 'No models are offered to spawn (config.json\'s "models" is empty): a sub-agent runs on your model.'
    found = models[:limit] if query.strip() == "*" else search(models, query, limit)
    if not found:
        ids = [entry.id for entry in models]
        more = f" and {len(ids) - MAX_IDS_LISTED} more" if len(ids) > MAX_IDS_LISTED else ""
        return (f"No model matches {query!r}. The models: {', '.join(ids[:MAX_IDS_LISTED])}{more}. "
                "Search again with other words.")
    shown = "\n".join(f"- {model_line(entry)}" for entry in found)
    return (f"{len(found)} of {len(models)} models (prices: US dollars per million tokens); give spawn the id as "
            f"model:\n{shown}")


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    return ToolResult(output=_answer(context.config, arguments["query"], int(arguments.get("limit", DEFAULT_LIMIT))),
                      is_error=False)


TOOL = Builtin(
    name=NAME, description=DESCRIPTION, parameters=PARAMETERS, run=run,
    # It only reads the config's catalog: nothing to undo, and running it again answers alike.
    concurrency_safe=True, replay="safe",
)


def for_config(config: Config) -> Builtin | None:
    """The tool when spawn's schema cannot list the whole catalog; None when it does, or spawn is off."""
    return TOOL if config.spawn.max_depth and len(offered(config)) > EMBEDDED_CATALOG_MAX else None
