"""``<home>/config.json``: user settings, every one optional.

A bad value never stops zagent: it is reported (by ``zagent doctor`` and as a session
warning) and its default is used instead, like a broken tool manifest.
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from zagent_core.problems import Problem, describe_errors

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


class ToolsConfig(BaseModel):
    model_config = _STRICT

    #: Tool names the engine refuses to run (and does not offer to a model).
    disabled: list[str] = []
    #: What the model is told a tool does, by the tool's name, in place of the tool's own description.
    descriptions: dict[str, str] = {}
    #: The name the model sees and calls a tool by, by the tool's own name (which the journal,
    #: the audit and replays keep): ``{"shell": "bash"}``.
    aliases: dict[str, str] = {}
    #: ``lazy``: MCP servers' tools (and folder tools, with ``lazy_folder_tools``) are left out of
    #: the request until the model finds them with ``tool_search``, which unlocks them;
    #: ``eager``: every tool is in every request.
    disclosure: Literal["eager", "lazy"] = "eager"
    #: Tools in every request all the same under lazy disclosure, by their own names.
    eager: list[str] = []
    #: Under lazy disclosure, defer the home's folder tools too (not only MCP servers' tools).
    lazy_folder_tools: bool = False

    def defers(self, name: str) -> bool:
        """Whether lazy disclosure keeps tool ``name`` (one that may be deferred) out of requests until unlocked."""
        return self.disclosure == "lazy" and name not in self.eager


class ApprovalsConfig(BaseModel):
    model_config = _STRICT

    #: Tools whose calls run without asking, though their manifest says ``"permission": "ask"``;
    #: each call still journals its approval (``via: config``), so the audit says why it ran.
    allow: list[str] = []


class ShellConfig(BaseModel):
    model_config = _STRICT

    #: Offer ``run_in_background``: off, shell only runs commands to their end (or timeout).
    background: bool = True


class FetchUrlConfig(BaseModel):
    """The ``fetch_url`` built-in's reach and bounds."""

    model_config = _STRICT

    #: Fetch private addresses too (loopback, link-local, private ranges, the cloud metadata
    #: address): off, a page the model is sent to cannot make zagent read the machine's network.
    allow_private: bool = False
    #: Hosts fetched even on a private address (``wiki.internal``, ``*.corp.example``, ``10.0.0.5``).
    allow_hosts: list[str] = []
    #: Hosts never fetched, on any address (same forms); they win over ``allow_hosts``.
    deny_hosts: list[str] = []
    #: A whole fetch, every redirect and the body included.
    timeout_seconds: float = Field(30.0, gt=0, le=600, allow_inf_nan=False)
    #: Redirects followed, each one checked as the first request was.
    max_redirects: int = Field(5, ge=0, le=20)
    #: The body read at most, before any conversion (a call's ``max_bytes`` may ask less).
    max_bytes: int = Field(5 * 1024 * 1024, ge=1024)


#: The search APIs ``web_search`` can ask.
SearchProviderName = Literal["searxng", "brave", "tavily"]


class WebSearchConfig(BaseModel):
    """The ``web_search`` built-in: offered only when ``provider`` is set."""

    model_config = _STRICT

    provider: SearchProviderName | None = None
    #: Where the provider is reached; SearXNG has no default (it is your own instance).
    base_url: str | None = None
    #: The variable holding the provider's key (Brave and Tavily need one); read once and
    #: withheld from every tool, as the model's key is.
    api_key_env: str | None = None
    #: Results one call answers at most (a call's ``limit`` may ask fewer).
    max_results: int = Field(10, ge=1, le=20)
    timeout_seconds: float = Field(30.0, gt=0, le=600, allow_inf_nan=False)

    @model_validator(mode="after")
    def _searxng_has_a_base_url(self) -> WebSearchConfig:
        if self.provider == "searxng" and not self.base_url:
            raise ValueError('provider "searxng" needs base_url: the address of your SearXNG instance '
                             '(e.g. "http://127.0.0.1:8888")')
        return self


class GenerateImageConfig(BaseModel):
    """The ``generate_image`` built-in: offered only when ``model`` is set. It is reached as
    ``openai:`` models are (``model.base_url``, ``model.api_key_env``)."""

    model_config = _STRICT

    #: The Images API model (``gpt-image-1``, ``dall-e-3``...).
    model: str | None = None
    #: Images one call may ask for at most.
    max_images: int = Field(4, ge=1, le=10)
    timeout_seconds: float = Field(300.0, gt=0, le=1800, allow_inf_nan=False)


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
    #: The ``shell`` built-in's options.
    shell: ShellConfig = ShellConfig()
    fetch_url: FetchUrlConfig = FetchUrlConfig()
    web_search: WebSearchConfig = WebSearchConfig()
    generate_image: GenerateImageConfig = GenerateImageConfig()


#: The placeholders of ``limits.truncation_marker``.
MARKER_FIELDS = ("bytes", "where", "path")


class LimitsConfig(BaseModel):
    model_config = _STRICT

    #: Used when a manifest says ``"timeout_seconds": 0`` or nothing.
    default_timeout_seconds: float = Field(120.0, gt=0, allow_inf_nan=False)
    #: Bytes of output the model receives; beyond it the head is cut and a marker says how much.
    output_cap_bytes: int = Field(32 * 1024, ge=256)
    #: That marker's text, with ``{bytes}`` (how many were left out), ``{where}`` (``head``, or
    #: ``middle`` for a shell command that explores) and ``{path}`` (the file holding the whole
    #: output); None: zagent's own. At most 500 characters: it is added to each cut output.
    truncation_marker: str | None = Field(default=None, min_length=1, max_length=500)
    #: What a call keeps of its output on disk (``full_output.txt``, a task's ``output.log``):
    #: past it, the first and last halves and a line between. A background task that passes
    #: it is stopped: it has no timeout, and its output is its own file, not the engine's pipe.
    output_file_bytes: int = Field(64 * 1024 * 1024, ge=64 * 1024)
    #: Between SIGTERM and SIGKILL when a tool is stopped.
    kill_grace_seconds: float = Field(2.0, ge=0, allow_inf_nan=False)
    #: Larger media files are listed but not attached.
    media_max_bytes: int = Field(5 * 1024 * 1024, ge=0)
    #: Files attached to one result, at most, and their total size; the others are listed, not attached.
    max_attachments: int = Field(10, ge=0)
    attachments_max_bytes: int = Field(20 * 1024 * 1024, ge=0)
    #: A notify file is read up to this size; a note says where reading stopped.
    notify_max_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    #: Notes and wake-ups one model request carries; a line says how many more the journal holds.
    notes_bytes_per_request: int = Field(32 * 1024, ge=1024)
    # What a person gives a session is refused whole over its cap, never cut: a refusal loses
    # nothing (the person still has the text), a silent cut of what they wrote would surprise.
    #: A user message (``zagent run``/``resume`` PROMPT, from argv or stdin): 256 KiB, about 64k
    #: tokens, a third of a 200k window; a longer text belongs in a file the agent reads in pages.
    user_message_bytes: int = Field(256 * 1024, ge=1024)
    #: An answer to an ``ask_user`` question: it is that call's result, and 64 KiB (about 16k
    #: tokens, twice a tool output's cap) is far more than any answer a person types.
    answer_bytes: int = Field(64 * 1024, ge=1024)
    #: The reason given with a decision (``zagent deny --reason``): a sentence or a paragraph
    #: for the model; 8 KiB (about 2k tokens) leaves room for instructions, not for a document.
    denial_reason_bytes: int = Field(8 * 1024, ge=256)
    # What machines produce is cut, with a marker and a warning: there is no one to refuse.
    #: An MCP server's tools offered, the first in its order: 100, so that one server and the
    #: built-ins stay under OpenAI's 128 tools a request.
    mcp_tools_per_server: int = Field(100, ge=1)
    #: Bytes of one MCP server's tool definitions (name, description, schema) offered: 100 KiB,
    #: about 25k tokens, Claude Code's cap on what one MCP tool may put in the context.
    mcp_tool_list_bytes: int = Field(100 * 1024, ge=1024)
    #: A sub-agent's final reply, as its spawn call's result; beyond it the end is cut (the
    #: child's session keeps it whole). 32 KiB, as any tool's output (``output_cap_bytes``).
    child_reply_bytes: int = Field(32 * 1024, ge=256)
    #: How deep calls may nest (a tool calling a tool, through ``zagent call`` or ``context.call_tool``):
    #: 1, as the seed's ``callTool``, lets a call's tool call others but not theirs; 0 turns nested calls off.
    nested_call_depth: int = Field(1, ge=0)
    #: Nested calls one call may make: past it they are refused, so a tool that loops on
    #: ``zagent call`` fills neither the journal nor the session's time without end.
    nested_calls_per_call: int = Field(100, ge=1)

    @field_validator("truncation_marker")
    @classmethod
    def _marker_fields(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(value)
                      if name is not None]
        except ValueError as exc:
            raise ValueError(f"{exc}; write a brace as {{{{ or }}}}") from None
        for name, spec, conversion in fields:
            # Only the names, as they are: a format spec could pad a marker to any width.
            if name not in MARKER_FIELDS or spec or conversion:
                raise ValueError(f"{{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}} "
                                 f"is not a placeholder of the marker; it takes {', '.join('{' + f + '}' for f in MARKER_FIELDS)}")
        return value


#: Model families that take images, as their names go (OpenAI's own, the open ones served
#: behind OpenAI-compatible endpoints, and other vendors' behind routers such as
#: ``anthropic/claude-sonnet-4``): matched at the start of a name part (after ``/`` or ``:``).
_SEEING = re.compile(r"(?:^|[/:])(?:gpt-4o|gpt-4\.1|gpt-4-turbo|gpt-4-vision|gpt-5|chatgpt-4o|o1(?:-20|$)|o3(?!-mini)|"
                     r"o4-mini|claude-(?!2|instant)|gemini|llava|bakllava|pixtral|llama3\.2-vision|llama-?4|"
                     r"minicpm-v|moondream|qwen2(?:\.5)?-?vl|gemma-?3(?!n?:(?:1b|270m))|[\w.-]*-vl\b)")


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
            family = {"vision": bool(_SEEING.search(name)), "pdf": False, "audio": False, "video": False}
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
    #: Compact the conversation before a request estimated past this fraction of the model's
    #: window (``model.context_window``): first clear old tool results, then summarise. 0: never
    #: on its own (``zagent compact`` still does, and a provider's "too long" still does once).
    compact_at: float = Field(0.8, ge=0, le=1, allow_inf_nan=False)
    #: Results of the calls of this many latest model requests are never cleared: the model is
    #: likely still working with them.
    keep_results_of_requests: int = Field(3, ge=0)


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
    #: The child's read-before-edit gate counts its parent's reads, and its own reads are the
    #: parent's when it ends; None: ``spawn.share_read_state``.
    share_read_state: bool | None = None


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
    #: The models a spawn call may pick, by id: ids of the catalog (config.json's ``models``), or
    #: (the older form) id -> model spec (``{"fast": "openai:gpt-4o-mini"}``); None: every catalog entry.
    models: list[str] | dict[str, str] | None = None
    #: Presets by name, offered as ``subagent_type``.
    subagents: dict[str, SubagentConfig] = {}
    #: Children share their parent's read-state (the seed's ``shareReadState``), unless their preset says otherwise.
    share_read_state: bool = False


def _a_spec(spec: str) -> str:
    if ":" not in spec:
        raise ValueError("a model spec is PROVIDER:MODEL (openai:gpt-4o-mini, anthropic:claude-sonnet-4-5, "
                         "scripted:PATH)")
    return spec


#: A price: US dollars per million tokens.
_Price = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class CatalogModel(BaseModel):
    """One model of config.json's ``models``: what it is, what it costs, how much it takes.

    Prices are US dollars per million tokens. Cache prices left out follow the provider:
    ``anthropic:`` writes cost 1.25x input and reads 0.1x; elsewhere cached input costs ``price_in``.
    """

    model_config = _STRICT

    #: What spawn calls and presets name it by.
    id: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
    #: ``openai:MODEL``, ``anthropic:MODEL`` (or ``scripted:PATH``).
    spec: Annotated[str, AfterValidator(_a_spec)]
    context_window: int | None = Field(default=None, ge=1024)
    max_output: int | None = Field(default=None, ge=1)
    price_in: _Price | None = None
    price_out: _Price | None = None
    price_cache_read: _Price | None = None
    price_cache_write: _Price | None = None
    #: It thinks before it answers (a reasoning model).
    reasoning: bool = False
    #: What it is good for, as spawn's schema and ``model_search`` show it.
    description: str = Field(default="", max_length=500)


def _ids_once(models: list[CatalogModel]) -> list[CatalogModel]:
    seen: set[str] = set()
    for entry in models:
        if entry.id in seen:
            raise ValueError(f'the id "{entry.id}" is given to two models; give each model its own id')
        seen.add(entry.id)
    return models


class AnthropicConfig(BaseModel):
    """Where ``anthropic:`` models are reached: the Messages API's own settings, apart from
    ``openai:``'s, so one config (a spawn catalog of both) sends each provider its own key."""

    model_config = _STRICT

    #: Default: ``ANTHROPIC_BASE_URL``, else ``https://api.anthropic.com`` (no ``/v1``, as the SDK takes it).
    base_url: str | None = None
    #: The variable holding the key; ``ANTHROPIC_API_KEY``, then ``ZAGENT_API_KEY``, after it.
    api_key_env: str | None = None
    #: ``anthropic-version``, the Messages API's version header.
    version: str = "2023-06-01"


#: How much a model thinks before it answers: a level, or (``anthropic:``) a budget of
#: thinking tokens, at least the 1,024 the Messages API asks for.
Thinking = Literal["off", "low", "medium", "high"] | Annotated[int, Field(ge=1024)]
#: The budget of thinking tokens each level stands for (what ``anthropic:`` sends, and how
#: levels and budgets compare: a sub-agent may not think more than its ceiling).
THINKING_BUDGETS: dict[str, int] = {"off": 0, "low": 2048, "medium": 8192, "high": 16384}


def thinking_budget(thinking: Thinking) -> int:
    """The thinking tokens ``thinking`` stands for; 0: none."""
    return thinking if isinstance(thinking, int) else THINKING_BUDGETS[thinking]


class ModelConfig(BaseModel):
    """How models are reached and asked. The key itself is never stored here."""

    model_config = _STRICT

    #: ``openai:``'s base URL (default: ``OPENAI_BASE_URL``, else ``https://api.openai.com/v1``).
    base_url: str | None = None
    #: The variable holding ``openai:``'s key; ``OPENAI_API_KEY``, then ``ZAGENT_API_KEY``, after it.
    api_key_env: str | None = None
    timeout_seconds: float = Field(120.0, gt=0, allow_inf_nan=False)
    max_retries: int = Field(3, ge=0, le=10)
    #: Passed on to the model when set (the provider's default otherwise; ``anthropic:`` takes 0 to 1).
    temperature: float | None = Field(default=None, ge=0, le=2, allow_inf_nan=False)
    #: The longest reply, in tokens (``anthropic:`` needs one: by model family when unset).
    max_tokens: int | None = Field(default=None, ge=1)
    #: The model's context window, in tokens (when unset: by model family, else 128,000).
    context_window: int | None = Field(default=None, ge=1024)
    #: Stream replies (server-sent events), which also keeps a long reply from timing out
    #: (the timeout is between two pieces); off for an endpoint that cannot.
    stream: bool = True
    #: Extended thinking / reasoning: ``off`` (nothing sent), ``low``, ``medium``, ``high`` or a
    #: budget in tokens; also the most a sub-agent's ``spawn(thinking=...)`` may ask for.
    thinking: Thinking = "off"
    anthropic: AnthropicConfig = AnthropicConfig()


class NormaliseRule(BaseModel):
    model_config = _STRICT

    #: A regular expression; what it matches is replaced before outputs are compared.
    pattern: str
    replacement: str = "<normalised>"


class ReplayConfig(BaseModel):
    model_config = _STRICT

    #: Your own rules for what legitimately changes between a recording and its replay.
    normalize: list[NormaliseRule] = []


#: How much of the file system a sandboxed process may change: the workspace (and its call's
#: own folders), or only its call's own folders; ``off``: no file-system or network sandbox.
SandboxMode = Literal["workspace-write", "read-only", "off"]


def _paths_given(value: list[str]) -> list[str]:
    if any(not path or "\0" in path for path in value):
        raise ValueError("a path is empty or holds a NUL character; give absolute paths, ~/... or paths relative "
                         "to the workspace")
    return value


class SandboxGrant(BaseModel):
    """What a tool's manifest (or an MCP server's entry) asks of the sandbox it runs in:
    ``"sandbox": "workspace-write"``, or an object with these fields."""

    model_config = _STRICT

    mode: Literal["workspace-write", "read-only"]
    #: Reach the network (otherwise only a loopback of its own).
    network: bool = False
    #: Paths writable besides the workspace and the call's own folders.
    writable: Annotated[list[str], AfterValidator(_paths_given)] = []
    #: Paths readable though the sandbox would hide them (inside the home).
    readable: Annotated[list[str], AfterValidator(_paths_given)] = []

    @model_validator(mode="before")
    @classmethod
    def _mode_alone(cls, value: Any) -> Any:
        # "sandbox": "read-only" is short for {"mode": "read-only"}.
        return {"mode": value} if isinstance(value, str) else value


class SandboxConfig(BaseModel):
    """Where processes run (bubblewrap, on Linux): see docs/security.md."""

    model_config = _STRICT

    #: The sandbox of what a model composes (``shell`` commands), and of every tool with
    #: ``tools: "all"``. Where bubblewrap cannot run, processes run as they would with ``off``,
    #: and each session says so in its warnings.
    mode: SandboxMode = "workspace-write"
    network: bool = False
    #: Paths writable besides the workspace and the call's own folders (absolute, ``~/...``,
    #: or relative to the workspace).
    writable: Annotated[list[str], AfterValidator(_paths_given)] = []
    #: Paths readable though they would be hidden (the home is, but for its tools and the call's folders).
    readable: Annotated[list[str], AfterValidator(_paths_given)] = []
    #: Give each call a /tmp (and $TMPDIR) of its own, gone when it ends.
    private_tmp: bool = False
    #: ``model``: only what a model composes runs sandboxed by default, a folder tool or an MCP
    #: server when its own ``sandbox`` asks; ``all``: every tool and server, under this section's
    #: grant (one asking for more is refused).
    tools: Literal["model", "all"] = "model"


#: What an MCP server may be called in config.json: its tools are offered as ``NAME__TOOL``.
MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*")
MCP_SERVER_NAME_MAX = 32


class McpServerConfig(BaseModel):
    """One MCP server whose tools zagent offers: a program it starts (``command``, spoken to
    on stdin/stdout) or a server already running (``url``, Streamable HTTP)."""

    model_config = _STRICT

    #: The program and its arguments, run with no shell (``["npx", "-y", "@scope/server", "."]``).
    command: list[str] | None = Field(default=None, min_length=1)
    #: Added to zagent's tool environment (which never holds the model's key).
    env: dict[str, str] = {}
    #: Where the program runs, relative to the workspace (default: the workspace).
    cwd: str | None = None
    #: The endpoint of a Streamable HTTP server (``http://127.0.0.1:3001/mcp``).
    url: str | None = None
    #: Sent with every HTTP request (``{"Authorization": "Bearer ..."}``).
    headers: dict[str, str] = {}
    #: How long one call may take (default: ``limits.default_timeout_seconds``).
    timeout_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    #: How long starting the server and listing its tools may take.
    startup_timeout_seconds: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    #: Run the program in the sandbox (``"workspace-write"``, ``"read-only"`` or an object, as a
    #: tool's manifest says it); without it, only with ``sandbox.tools: "all"``.
    sandbox: SandboxGrant | None = None
    #: Every tool of the server only looks, whatever its annotations say (as ``readOnlyHint``): its calls
    #: run side by side, run again after a crash, and a ``readonly`` sub-agent preset gets them.
    readonly: bool = False

    @field_validator("command", mode="before")
    @classmethod
    def _command_is_a_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError('"command" is a list: the program and its arguments, run with no shell, e.g. '
                             '["node", "server.js", "--flag"]')
        return value

    @model_validator(mode="after")
    def _one_way_to_reach_it(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError('an MCP server needs "command" (a program zagent starts) or "url" (a server already '
                             'running), and only one of them')
        if self.url is not None:
            if not self.url.startswith(("http://", "https://")):
                raise ValueError('"url" must be an http:// or https:// URL (a Streamable HTTP endpoint)')
            if self.env or self.cwd is not None or self.sandbox is not None:
                raise ValueError('"env", "cwd" and "sandbox" are for a server zagent starts ("command"); a "url" '
                                 'server takes "headers"')
        elif self.headers:
            raise ValueError('"headers" are for a "url" server; a "command" server takes "env"')
        return self


def _server_name(name: str) -> str:
    if len(name) > MCP_SERVER_NAME_MAX or not MCP_SERVER_NAME.fullmatch(name):
        raise ValueError(f"the name must be 1-{MCP_SERVER_NAME_MAX} letters, digits, - and single _ (its tools are "
                         "offered as NAME__TOOL, and model APIs take no other characters in a tool name)")
    return name


class McpConfig(BaseModel):
    model_config = _STRICT

    #: The MCP servers whose tools are offered, by name (letters, digits, ``-`` and single ``_``).
    servers: dict[Annotated[str, AfterValidator(_server_name)], McpServerConfig] = {}


class TelemetryConfig(BaseModel):
    """OpenTelemetry traces of the sessions as they run (docs/telemetry.md; the ``zagent[otel]`` extra)."""

    model_config = _STRICT

    #: The OTLP/HTTP collector's base URL (``http://127.0.0.1:4318``; ``/v1/traces`` is added unless
    #: given). Unset: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) if set, else no export.
    otlp_endpoint: str | None = None
    #: Put arguments, outputs, messages and replies into the spans; off, spans carry names, ids,
    #: times and token counts only.
    capture_content: bool = False

    @field_validator("otlp_endpoint")
    @classmethod
    def _an_http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError('"otlp_endpoint" must be an http:// or https:// URL, e.g. http://127.0.0.1:4318')
        return value


class Config(BaseModel):
    model_config = _STRICT

    agent: AgentConfig = AgentConfig()
    replay: ReplayConfig = ReplayConfig()
    model: ModelConfig = ModelConfig()
    tools: ToolsConfig = ToolsConfig()
    approvals: ApprovalsConfig = ApprovalsConfig()
    builtins: BuiltinsConfig = BuiltinsConfig()
    spawn: SpawnConfig = SpawnConfig()
    #: The model catalog: what ``spawn`` offers (``spawn.models``) and what costs are priced by.
    models: Annotated[list[CatalogModel], AfterValidator(_ids_once)] = []
    limits: LimitsConfig = LimitsConfig()
    capabilities: CapabilitiesConfig = CapabilitiesConfig()
    journal: JournalConfig = JournalConfig()
    mcp: McpConfig = McpConfig()
    sandbox: SandboxConfig = SandboxConfig()
    telemetry: TelemetryConfig = TelemetryConfig()


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


_MCP_SERVERS = ("mcp", "servers")


def _dropped_at(loc: tuple[int | str, ...], kind: str) -> tuple[int | str, ...]:
    """What a bad value takes with it: an MCP server's entry goes whole (half a server is no
    server; a bad name, ``[key]``, too), a catalog model's too (a model priced or reached
    wrongly costs money); an unknown field, or anything else, only itself."""
    if kind == "extra_forbidden":
        return loc
    if loc[:2] == _MCP_SERVERS and len(loc) >= 3:
        return loc[:3]
    return loc[:2] if loc[:1] == ("models",) and len(loc) >= 2 else loc


def _consequence(problem: str) -> str:
    """The problem, and what is done about it. An MCP server's values are not quoted: its
    ``env`` and ``headers`` hold secrets, which must not reach the session's warnings (the journal)."""
    if problem.startswith('"mcp.servers.'):
        problem = re.sub(r" \(got .*\)$", "", problem, flags=re.DOTALL).replace('.[key]"', '"', 1)
        return f"{problem}; that server is left out"
    if re.match(r'"models\.\d+', problem):
        return f"{problem}; that model is left out of the catalog"
    return f"{problem}; using the default"


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
            reported += [Problem(source=source, message=_consequence(p)) for p in problems]
            reported += [Problem(source=source, message=u, severity="warning") for u in unknown]
            # Highest index first, so dropping one list item does not shift the next.
            locations = sorted((_dropped_at(tuple(err["loc"]), err["type"]) for err in exc.errors()), key=_sort_key,
                               reverse=True)
            if not any([_drop(raw, loc) for loc in locations]):
                break
    return Config(), reported + [Problem(source=source, message="could not be repaired; using defaults")]
