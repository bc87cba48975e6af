"""What sessions cost: their model replies' tokens, priced by the catalog (config.json's ``models``).

A reply is priced by the model its turn asked (``turn_started``'s spec), else by the name the
provider gave it; a model the catalog does not price leaves the cost unknown (None), never 0,
and is named. Costs are counted per turn, per session, and per subtree (the session and every
sub-agent below it, at any depth), from the journal alone: prices edited later price every
session anew.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zagent_core.history.trees import TreeNode, session_tree
from zagent_core.journal.events import ModelReplied, TurnStarted
from zagent_core.tools.model_catalog import Usage, cost, priced_by

if TYPE_CHECKING:
    from zagent_core.config import CatalogModel, Config
    from zagent_core.journal.protocol import Journal


@dataclass(frozen=True)
class Spend:
    """Tokens of some replies and what they cost (US dollars; None when a model has no price)."""

    usage: Usage = Usage()
    usd: float | None = 0.0
    #: The models of these replies that the catalog does not price.
    unpriced: tuple[str, ...] = ()

    def __add__(self, other: Spend) -> Spend:
        usd = None if self.usd is None or other.usd is None else self.usd + other.usd
        return Spend(self.usage + other.usage, usd, tuple(dict.fromkeys(self.unpriced + other.unpriced)))

    def to_dict(self) -> dict[str, Any]:
        return {"input_tokens": self.usage.input_tokens, "output_tokens": self.usage.output_tokens,
                "cache_read_tokens": self.usage.cache_read_tokens,
                "cache_write_tokens": self.usage.cache_write_tokens,
                "cost_usd": None if self.usd is None else round(self.usd, 6), "unpriced_models": list(self.unpriced)}


@dataclass(frozen=True)
class SessionCosts:
    session_id: str
    #: Each turn's replies, in order (a reply before any turn began counts in the first).
    turns: tuple[Spend, ...]
    session: Spend
    #: The session and its sub-agents, at any depth.
    subtree: Spend
    #: Sub-agents below it, at any depth.
    descendants: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as ``sessions show --json`` and ``audit --json`` give it."""
        return {"session_id": self.session_id, "session": self.session.to_dict(), "subtree": self.subtree.to_dict(),
                "descendants": self.descendants,
                "turns": [{"turn": number} | spend.to_dict() for number, spend in enumerate(self.turns, start=1)]}


def _usage(reply: ModelReplied) -> Usage:
    return Usage(reply.input_tokens, reply.output_tokens, reply.cache_read_tokens, reply.cache_creation_tokens)


def _priced(usage: Usage, spec: str | None, model: str, prices: dict[str, CatalogModel]) -> Spend:
    """``usage`` of replies of the model ``spec`` asked for (``model``, as the provider named it)."""
    entry = prices.get(spec or "") or prices.get(model)
    usd = cost(entry, usage) if entry is not None else None
    return Spend(usage, usd, () if usd is not None else (spec or model,))


def _reply_spend(reply: ModelReplied, spec: str | None, prices: dict[str, CatalogModel]) -> Spend:
    return _priced(_usage(reply), spec, reply.model, prices)


def _turns(journal: Journal, session_id: str, prices: dict[str, CatalogModel]) -> list[Spend]:
    turns: list[Spend] = []
    spec: str | None = None
    for stored in journal.read(session_id, types=("turn_started", "model_replied")):
        match stored.event:
            case TurnStarted(model=model):
                spec = model or spec
                turns.append(Spend())
            case ModelReplied() as reply:
                if not turns:
                    turns.append(Spend())
                turns[-1] += _reply_spend(reply, spec, prices)
    return turns


def _total(turns: list[Spend]) -> Spend:
    return sum(turns, Spend())


def tree_costs(journal: Journal, root: TreeNode, config: Config) -> dict[str, SessionCosts]:
    """What each session of the tree from ``root`` down cost, by session id."""
    prices = priced_by(config)
    found: dict[str, SessionCosts] = {}

    def visit(node: TreeNode) -> SessionCosts:
        turns = _turns(journal, node.session_id, prices)
        below = [visit(child) for child in node.children]
        own = _total(turns)
        found[node.session_id] = SessionCosts(
            session_id=node.session_id, turns=tuple(turns), session=own,
            subtree=sum((child.subtree for child in below), own),
            descendants=sum(1 + child.descendants for child in below))
        return found[node.session_id]

    visit(root)
    return found


def session_costs(journal: Journal, session_id: str, config: Config) -> SessionCosts | None:
    """What the session cost, turn by turn, and with its sub-agents; None when there is no such session."""
    root = session_tree(journal, session_id)
    return tree_costs(journal, root, config)[session_id] if root is not None else None


@dataclass(frozen=True)
class UsageTally:
    """A session's replies' tokens by the model that prices them, read up to ``version``: carried
    on by :func:`tally_usage` as the session grows, and priced only when shown (:meth:`spend`), so
    a tally kept across prices edited in config.json prices by the new ones."""

    version: int = 0
    #: The model the latest turn asked for (``turn_started``), which prices the replies after it.
    spec: str | None = None
    #: Tokens by (the spec asked for, the model the provider named).
    usage: tuple[tuple[tuple[str | None, str], Usage], ...] = ()

    def spend(self, prices: dict[str, CatalogModel]) -> Spend:
        """What these tokens cost by ``prices`` (:func:`~zagent_core.tools.model_catalog.priced_by`)."""
        return _total([_priced(usage, spec, model, prices) for (spec, model), usage in self.usage])


def tally_usage(journal: Journal, session_id: str, since: UsageTally = UsageTally()) -> UsageTally:
    """``since`` and the session's replies after it: only the events after ``since.version`` are
    read, so a kept tally costs a session's new events, not its whole length."""
    spec, version, usage = since.spec, since.version, dict(since.usage)
    for stored in journal.read(session_id, after_version=since.version, types=("turn_started", "model_replied")):
        version = stored.version
        match stored.event:
            case TurnStarted(model=model):
                spec = model or spec
            case ModelReplied() as reply:
                key = (spec, reply.model)
                usage[key] = usage.get(key, Usage()) + _usage(reply)
    return UsageTally(version, spec, tuple(usage.items()))
