"""The model catalog (config.json's ``models``): which models ``spawn`` offers, how each is
shown to the model, and what a reply of it costs.

One line per model (:func:`model_line`) is how a model is shown everywhere, in spawn's
schema and in ``model_search``'s answers alike, so the model never sees two spellings of
one entry (the seed's ``formatModelLine``).
"""

from __future__ import annotations

from dataclasses import dataclass

from zagent_core.config import CatalogModel, Config, ModelConfig

#: Catalogs of up to this many models are listed in spawn's schema; a larger one is found
#: with ``model_search`` instead (listed, it would cost every request its tokens).
EMBEDDED_CATALOG_MAX = 8

#: What Anthropic charges for the cache, as a share of the input price, when an entry gives no cache price.
ANTHROPIC_CACHE_WRITE = 1.25
ANTHROPIC_CACHE_READ = 0.1


def known(config: Config) -> list[CatalogModel]:
    """Every model config.json names: the catalog, then ``spawn.models``' older id -> spec
    entries (unpriced) whose id the catalog does not have."""
    entries = list(config.models)
    ids = {entry.id for entry in entries}
    if isinstance(config.spawn.models, dict):
        # Built unchecked: an old entry's bad spec is reported by spawn_problems, and refused when spawned.
        entries += [CatalogModel.model_construct(id=name, spec=spec) for name, spec in config.spawn.models.items()
                    if name not in ids]
    return entries


def offered(config: Config) -> list[CatalogModel]:
    """The models a spawn call may pick: ``spawn.models``' ids (or its older entries), else the whole catalog."""
    wanted = config.spawn.models
    every = {entry.id: entry for entry in known(config)}
    if wanted is None:
        return list(config.models)
    return [every[name] for name in wanted if name in every]


def provider(entry: CatalogModel) -> str:
    return entry.spec.partition(":")[0]


def _price(value: float | None) -> str:
    return "?" if value is None else f"${value:g}"


def _tokens(count: int) -> str:
    return f"{count // 1000}k" if count % 1000 == 0 else f"{count:,}"


def model_line(entry: CatalogModel) -> str:
    """One model in a line: id, provider, prices per million tokens, window, reasoning, and what it is for."""
    parts = [f"{entry.id} ({provider(entry)})"]
    if entry.price_in is None and entry.price_out is None:
        parts.append("price unknown")
    else:
        parts.append(f"{_price(entry.price_in)} in / {_price(entry.price_out)} out per 1M tokens")
    if entry.context_window is not None:
        parts.append(f"{_tokens(entry.context_window)} window")
    if entry.max_output is not None:
        parts.append(f"{_tokens(entry.max_output)} max output")
    if entry.reasoning:
        parts.append("reasoning")
    line = ", ".join(parts)
    return f"{line}: {' '.join(entry.description.split())}" if entry.description.strip() else line


def search(entries: list[CatalogModel], query: str, limit: int) -> list[CatalogModel]:
    """The models any word of ``query`` is in (case aside), best first: a word in the id or
    spec counts twice a word in the description; ties keep the catalog's order."""
    words = set(query.lower().split())
    scored: list[tuple[int, int, CatalogModel]] = []
    for index, entry in enumerate(entries):
        name, description = f"{entry.id} {entry.spec}".lower(), entry.description.lower()
        score = sum(2 * (word in name) + (word in description) for word in words)
        if score:
            scored.append((-score, index, entry))
    return [entry for _, _, entry in sorted(scored)[:limit]]


@dataclass(frozen=True)
class Usage:
    """Tokens of some model replies: input (not from the cache), output, and the cache's reads and writes."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cache_read_tokens + other.cache_read_tokens,
                     self.cache_write_tokens + other.cache_write_tokens)


def cost(entry: CatalogModel, usage: Usage) -> float | None:
    """What ``usage`` of ``entry`` cost in US dollars; None when the entry gives no input or output price."""
    if entry.price_in is None or entry.price_out is None:
        return None
    anthropic = provider(entry) == "anthropic"
    read = entry.price_cache_read if entry.price_cache_read is not None else (
        entry.price_in * ANTHROPIC_CACHE_READ if anthropic else entry.price_in)
    write = entry.price_cache_write if entry.price_cache_write is not None else (
        entry.price_in * ANTHROPIC_CACHE_WRITE if anthropic else entry.price_in)
    return (usage.input_tokens * entry.price_in + usage.output_tokens * entry.price_out
            + usage.cache_read_tokens * read + usage.cache_write_tokens * write) / 1_000_000


def priced_by(config: Config) -> dict[str, CatalogModel]:
    """The catalog by model spec, and by the model's own name (what a provider's reply calls it):
    the first entry of each wins."""
    found: dict[str, CatalogModel] = {}
    for entry in known(config):
        found.setdefault(entry.spec, entry)
        found.setdefault(entry.spec.partition(":")[2], entry)
    return found


def model_settings(config: Config, spec: str) -> ModelConfig:
    """How the model ``spec`` is asked: config.json's ``model``, with its catalog entry's
    ``context_window`` and ``max_output`` (as ``max_tokens``) in place of ``model``'s, which
    apply to every model alike."""
    entry = priced_by(config).get(spec)
    if entry is None:
        return config.model
    given = {"context_window": entry.context_window, "max_tokens": entry.max_output}
    return config.model.model_copy(update={key: value for key, value in given.items() if value is not None})
