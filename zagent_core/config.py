"""``<home>/config.json``: user settings, every one optional.

A bad value never stops zagent: it is reported (by ``zagent doctor`` and as a session
warning) and its default is used instead, like a broken tool manifest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from zagent_core.problems import Problem, describe_errors

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


class ToolsConfig(BaseModel):
    model_config = _STRICT

    #: Tool names the engine refuses to run (and does not offer to a model).
    disabled: list[str] = []


class ApprovalsConfig(BaseModel):
    model_config = _STRICT

    #: Tools whose calls run without asking, though their manifest says ``"permission": "ask"``;
    #: each call still journals its approval (``via: config``), so the audit says why it ran.
    allow: list[str] = []


class BuiltinsConfig(BaseModel):
    model_config = _STRICT

    #: The built-in tools offered (default: every one); ``tools.disabled`` applies to them too.
    enabled: list[str] | None = None
    #: Refuse any path that resolves outside the workspace. Off by default: where the
    #: engine runs (a container, a sandbox) is the boundary, as for folder tools.
    confine_to_workspace: bool = False
    #: ``edit``, ``multi_edit`` and ``write_file`` of an existing file need a read of it in
    #: the session, and refuse when it changed since.
    require_read_before_edit: bool = True


class LimitsConfig(BaseModel):
    model_config = _STRICT

    #: Used when a manifest says ``"timeout_seconds": 0`` or nothing.
    default_timeout_seconds: float = Field(120.0, gt=0, allow_inf_nan=False)
    #: Bytes of output the model receives; beyond it the head is cut and a marker says how much.
    output_cap_bytes: int = Field(32 * 1024, ge=256)
    #: Between SIGTERM and SIGKILL when a tool is stopped.
    kill_grace_seconds: float = Field(2.0, ge=0, allow_inf_nan=False)
    #: Larger media files are listed but not attached.
    media_max_bytes: int = Field(5 * 1024 * 1024, ge=0)
    #: Files attached to one result, at most, and their total size; the others are listed, not attached.
    max_attachments: int = Field(10, ge=0)
    attachments_max_bytes: int = Field(20 * 1024 * 1024, ge=0)
    #: A notify file is read up to this size; a note says where reading stopped.
    notify_max_bytes: int = Field(64 * 1024 * 1024, ge=1024)


#: Model families that take images, by a part of their name: OpenAI's vision models and the
#: open ones served behind OpenAI-compatible endpoints (Ollama, vLLM, llama.cpp).
_SEES = ("gpt-4o", "gpt-4.1", "gpt-4-turbo", "gpt-4-vision", "gpt-5", "chatgpt-4o", "o1", "o3", "o4", "vision", "llava",
         "-vl", "vl-", "pixtral", "gemma3", "minicpm-v", "moondream", "bakllava", "qwen2.5vl", "llama4")


class CapabilitiesConfig(BaseModel):
    """What the model can consume; tools see it as ``ZAGENT_CAPS``.

    What ``config.json`` sets is taken as set; the rest follows the model the session's
    latest turn asked (:meth:`for_model`).
    """

    model_config = _STRICT

    vision: bool = True
    audio: bool = False
    pdf: bool = True
    video: bool = False

    def as_env(self) -> str:
        return ",".join(f"{name}={str(on).lower()}" for name, on in self.model_dump().items())

    def for_model(self, spec: str | None) -> CapabilitiesConfig:
        """These capabilities for the model ``spec`` names: the fields ``config.json`` left
        unset from the model's provider and family (``anthropic:`` Claude 3 and later take
        images and PDFs; ``openai:`` vision models take images, and Chat Completions as zagent
        speaks it no PDF; other providers, and no model yet, the defaults above)."""
        provider, _, name = (spec or "").partition(":")
        name = name.lower()
        if provider == "anthropic":
            modern = "claude" in name and not any(old in name for old in ("claude-2", "claude-instant"))
            family = {"vision": modern, "pdf": modern, "audio": False, "video": False}
        elif provider == "openai":
            family = {"vision": any(part in name for part in _SEES) and "o1-mini" not in name, "pdf": False,
                      "audio": False, "video": False}
        else:
            return self
        return self.model_copy(update={field: on for field, on in family.items() if field not in self.model_fields_set})


class JournalConfig(BaseModel):
    model_config = _STRICT

    #: ``FULL`` (an fsync per append) keeps every append through a power cut or OS crash;
    #: ``NORMAL`` is cheaper and survives the engine being killed, but a power cut can roll
    #: back the last appends after a tool they announced has started.
    synchronous: Literal["NORMAL", "FULL"] = "FULL"
    #: Where the journal is, when not in the home's ``journal.db``: ``sqlite:///PATH`` or
    #: ``postgresql://...`` (``--journal`` and ``$ZAGENT_JOURNAL`` override it).
    url: str | None = None
    #: How long a driver's lease on a session lasts unless renewed; it renews it every third
    #: of that. A driver that stopped (SIGKILL, a lost host) is taken over after it.
    lease_seconds: float = Field(default=30.0, ge=1.0, le=3600.0)


class AgentConfig(BaseModel):
    model_config = _STRICT

    #: ``scripted:PATH``, ``openai:MODEL`` or ``anthropic:MODEL``; ``--model`` overrides it.
    model: str | None = None
    system_prompt: str = (
        "You are a helpful agent. Use the tools you are given when they help; when a tool result says "
        "what to change, change it and try again."
    )
    #: Model requests in one run (each reply is one), so a looping model stops.
    max_turns: int = Field(50, ge=1)
    #: Tool calls the model may make in one turn before it is stopped.
    max_tool_calls_per_turn: int = Field(100, ge=1)
    #: Concurrency-safe calls of one reply run together, this many at most.
    max_concurrent_tools: int = Field(10, ge=1)
    #: How long a headless run stays alive for background tasks to wake it.
    max_background_wait_minutes: float = Field(30.0, ge=0, allow_inf_nan=False)


class SubagentConfig(BaseModel):
    """A preset ``spawn`` offers as ``subagent_type``: what such a child is told, may use, runs on."""

    model_config = _STRICT

    #: Shown to the model in the spawn tool's description, so it picks the right type.
    description: str = ""
    #: The child's system prompt (``spawn``'s ``system`` still wins).
    system_prompt: str | None = None
    #: The tools such a child may use (names, built-in or folder); None: the parent's.
    tools: list[str] | None = None
    #: Only tools that change nothing (the read-only built-ins, folder tools marked
    #: ``replay: safe``); ``tools`` wins when both are given.
    readonly: bool = False
    #: A catalog id (``spawn.models``) or a model spec; None: the parent's model.
    model: str | None = None


class SpawnConfig(BaseModel):
    """Sub-agents: the ``spawn`` built-in's limits, model catalog and presets."""

    model_config = _STRICT

    #: Children running at once in one process; past it a top-level spawn waits for a
    #: slot and a child's spawn is refused.
    max_concurrent: int = Field(3, ge=1)
    #: How deep children may nest: 1 allows children but no grandchildren; 0 turns spawn off.
    max_depth: int = Field(3, ge=0)
    #: One run of a child stops after this long (``timeout``), checked between its steps.
    child_timeout_minutes: float = Field(30.0, gt=0, allow_inf_nan=False)
    #: Model requests one run of a child may make.
    child_max_turns: int = Field(50, ge=1)
    #: Models a spawn call may pick by id: id -> model spec (``openai:gpt-4o-mini``...).
    models: dict[str, str] = {}
    #: Presets by name, offered as ``subagent_type``.
    subagents: dict[str, SubagentConfig] = {}


class ModelConfig(BaseModel):
    """How ``openai:`` and ``anthropic:`` models are reached and asked. The key itself is never stored here."""

    model_config = _STRICT

    #: The API's base URL (default: ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``, else the provider's own).
    base_url: str | None = None
    #: The environment variable that holds the API key; ``ZAGENT_API_KEY`` and the
    #: provider's own (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``) are looked at after it.
    api_key_env: str | None = None
    timeout_seconds: float = Field(120.0, gt=0, allow_inf_nan=False)
    max_retries: int = Field(3, ge=0, le=10)
    #: Passed on to the model when set (the provider's default otherwise).
    temperature: float | None = Field(default=None, ge=0, le=2, allow_inf_nan=False)
    #: The longest reply, in tokens (``anthropic`` needs one: 8192 when unset).
    max_tokens: int | None = Field(default=None, ge=1)
    #: Stream replies (server-sent events) when the CLI shows them as they arrive; off for
    #: an endpoint that cannot.
    stream: bool = True
    #: ``anthropic-version``, the Messages API's version header.
    anthropic_version: str = "2023-06-01"


class NormaliseRule(BaseModel):
    model_config = _STRICT

    #: A regular expression; what it matches is replaced before outputs are compared.
    pattern: str
    replacement: str = "<normalised>"


class ReplayConfig(BaseModel):
    model_config = _STRICT

    #: Your own rules for what legitimately changes between a recording and its replay.
    normalize: list[NormaliseRule] = []


class Config(BaseModel):
    model_config = _STRICT

    agent: AgentConfig = AgentConfig()
    replay: ReplayConfig = ReplayConfig()
    model: ModelConfig = ModelConfig()
    tools: ToolsConfig = ToolsConfig()
    approvals: ApprovalsConfig = ApprovalsConfig()
    builtins: BuiltinsConfig = BuiltinsConfig()
    spawn: SpawnConfig = SpawnConfig()
    limits: LimitsConfig = LimitsConfig()
    capabilities: CapabilitiesConfig = CapabilitiesConfig()
    journal: JournalConfig = JournalConfig()


def _drop(raw: dict[str, Any], loc: tuple[int | str, ...]) -> bool:
    """Remove the value at ``loc`` so the default is used; False if it is not there."""
    node: Any = raw
    for part in loc[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and -len(node) <= part < len(node):
            node = node[part]
        else:
            return False
    if isinstance(node, dict) and loc[-1] in node:
        del node[loc[-1]]
        return True
    if isinstance(node, list) and isinstance(loc[-1], int) and loc[-1] < len(node):
        del node[loc[-1]]
        return True
    return False


def _sort_key(loc: tuple[int | str, ...]) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, part) if isinstance(part, int) else (1, part) for part in loc)


def load_config(path: Path) -> tuple[Config, list[Problem]]:
    """Read the config, keeping every valid value and reporting every bad one."""
    if not path.exists():
        return Config(), []
    source = path.name  # relative to the home, like "tools/x"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return Config(), [Problem(source=source, message=f"cannot be read ({exc}); using defaults")]
    except json.JSONDecodeError as exc:
        return Config(), [Problem(source=source, message=f"is not valid JSON: {exc}; using defaults")]
    except RecursionError:
        return Config(), [Problem(source=source, message="is nested too deeply; using defaults")]
    if not isinstance(raw, dict):
        return Config(), [Problem(source=source, message="must be a JSON object; using defaults")]

    reported: list[Problem] = []
    # Each pass drops the values pydantic refused; nested models may refuse more once
    # a parent is fixed, so loop until it validates (bounded by the number of values).
    for _ in range(100):
        try:
            return Config.model_validate(raw), reported
        except ValidationError as exc:
            problems, unknown = describe_errors(exc, Config)
            reported += [Problem(source=source, message=f"{p}; using the default") for p in problems]
            reported += [Problem(source=source, message=u, severity="warning") for u in unknown]
            # Highest index first, so dropping one list item does not shift the next.
            locations = sorted((tuple(err["loc"]) for err in exc.errors()), key=_sort_key, reverse=True)
            if not any([_drop(raw, loc) for loc in locations]):
                break
    return Config(), reported + [Problem(source=source, message="could not be repaired; using defaults")]
