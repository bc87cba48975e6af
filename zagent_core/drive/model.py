"""Choosing the model a session runs with: given, journaled by the session, or configured."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from zagent_core.drive.errors import NoModelError
from zagent_core.journal.views import MODELLESS_ORIGINS

if TYPE_CHECKING:
    from zagent_core.agent.models import Model
    from zagent_core.journal.views import SessionState
    from zagent_core.session.engine import Engine


def model_spec(engine: Engine, given: str | None, state: SessionState | None) -> tuple[str | None, str | None]:
    """The model spec to run with and its endpoint: ``given``, else what the session
    journaled, else config (``(None, None)``: a session that never had a model)."""
    if given is not None:
        return given, None
    if state is not None and state.model:
        return state.model, state.model_base_url
    if state is not None and state.origin in MODELLESS_ORIGINS:
        return None, None
    return engine.config.agent.model, None


def choose_model(engine: Engine, given: str | None, state: SessionState | None,
                 prompt: str | None) -> tuple[Model | None, str]:
    """The model to run with, and its spec as journaled for a resume (a script's path made
    absolute, so it is found from anywhere); no model for a session that never had one.

    Raises :class:`NoModelError` when a model is needed and none is found, or the spec loads none.
    """
    from zagent_core.agent.models import load_model
    from zagent_core.agent.models.endpoint import carries_credentials, shown_url
    from zagent_core.tools.model_catalog import model_settings

    spec, base_url = model_spec(engine, given, state)
    if not spec:
        if state is None or prompt is not None or state.origin == "run":
            # A run cut off before its first turn journaled its model cannot guess it.
            raise NoModelError('no model: give --model (scripted:PATH, openai:MODEL or anthropic:MODEL) or set '
                               '"agent": {"model": ...} in config.json')
        return None, ""
    config = model_settings(engine.config, spec)
    # A journaled endpoint with credentials was journaled masked: they are found again where
    # they came from (config.json or the provider's *_BASE_URL variable), or the resume stops.
    masked = base_url is not None and carries_credentials(base_url) and shown_url(base_url) == base_url
    if base_url is not None and not masked:
        config = config.model_copy(update={"base_url": base_url, "anthropic": config.anthropic.model_copy(
            update={"base_url": base_url})})
    try:
        model = load_model(spec, config)
    except ValueError as exc:
        raise NoModelError(str(exc)) from None
    if masked and getattr(model, "shown_url", None) != base_url:
        raise NoModelError(f"the session asked {spec} at {base_url}, whose credentials the journal does not keep: "
                           "give that URL again in config.json (model.base_url) or the provider's *_BASE_URL "
                           "variable, or give --model")
    kind, _, path = spec.partition(":")
    return model, f"scripted:{Path(path).resolve()}" if kind == "scripted" and path else spec
