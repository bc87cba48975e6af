"""What the model is shown of the tools, where config.json's ``tools`` section says so: a
description in place of a tool's own (``tools.descriptions``) and a name (``tools.aliases``).

An alias lives between the model and the engine only: the request's tool list names the
alias, and a call by it is mapped back to the tool's own name before anything is journaled,
so the journal, the audit, replays and state never see an alias and changing one never
changes history.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from zagent_core.config import Config
from zagent_core.errors import ZagentError
from zagent_core.journal.events import ModelReplied
from zagent_core.problems import Problem, did_you_mean

#: What model APIs take as a tool name (OpenAI's and Anthropic's rule alike).
ALIAS_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")


class AliasError(ZagentError, ValueError):
    """config.json's ``tools.aliases`` would give the model a name it cannot use, or two tools one name."""


class Shown:
    """The names and descriptions config.json gives the tools, both ways."""

    def __init__(self, config: Config) -> None:
        self.aliases = dict(config.tools.aliases)
        self.descriptions = dict(config.tools.descriptions)
        self._canonical = {alias: name for name, alias in self.aliases.items()}

    def name(self, canonical: str) -> str:
        """The name the model sees ``canonical`` by."""
        return self.aliases.get(canonical, canonical)

    def canonical(self, name: str) -> str:
        """The tool a model's call by ``name`` is for (a recorded reply names tools by their own names)."""
        return self._canonical.get(name, name)

    def canonical_reply(self, reply: ModelReplied) -> ModelReplied:
        """``reply`` with its calls by the tools' own names: the journal never holds an alias, so a
        replay under another alias still matches."""
        if not self.aliases:
            return reply
        return reply.model_copy(update={"tool_calls": [
            call.model_copy(update={"name": self.canonical(call.name)}) for call in reply.tool_calls]})

    def description(self, canonical: str, own: str) -> str:
        """What the model is told ``canonical`` does."""
        return self.descriptions.get(canonical, own)


def problems(config: Config, known: Collection[str]) -> list[Problem]:
    """What is wrong with ``tools.aliases`` (errors: the engine refuses to start a session),
    ``tools.descriptions`` and ``tools.eager`` (warnings: a name no tool has) against the tools ``known``."""
    found: list[Problem] = []

    def unknown(key: str, name: str) -> None:
        found.append(Problem(source="config.json", severity="warning",
                             message=f'tools.{key} names "{name}", which is not a tool{did_you_mean(name, known)}; '
                                     "it is left unused"))

    for key, names in (("descriptions", config.tools.descriptions), ("eager", config.tools.eager)):
        for name in names:
            if name not in known:
                unknown(key, name)
    taken: dict[str, str] = {}
    for name, alias in config.tools.aliases.items():
        if name not in known:
            unknown("aliases", name)
        why = None
        if not ALIAS_PATTERN.fullmatch(alias):
            why = "is not a valid tool name (1-64 letters, digits, _ and -, as model APIs take)"
        elif alias != name and alias in known:
            why = f'is the name of another tool, "{alias}"'
        elif alias in taken:
            why = f'is also the alias of "{taken[alias]}"'
        if why is not None:
            found.append(Problem(source="config.json", message=f'tools.aliases gives "{name}" the alias "{alias}", '
                                                               f"which {why}: give it another"))
        taken.setdefault(alias, name)
    return found


def refuse_bad_aliases(config: Config, known: Collection[str]) -> None:
    """Raise :class:`AliasError` when ``tools.aliases`` is wrong: a model would call the wrong tool."""
    wrong = [str(p) for p in problems(config, known) if p.severity == "error"]
    if wrong:
        raise AliasError("; ".join(wrong))
