"""An MCP tool's result as the model receives it: text parts joined, files saved in the
call's output folder and attached, links and resources described (see :func:`to_result`)."""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zagent_core.tools.inprocess import BuiltinContext
from zagent_core.tools.results import MAX_STRUCTURED_BYTES, CallPaths, ToolResult, build_result, json_problem
from zagent_core.tools.runner import ProcessOutcome
from zagent_core.tools.text import storable_json

if TYPE_CHECKING:
    import mcp_types


def _file_name(index: int, kind: str, mime: str, uri: str | None = None) -> str:
    """A name for a part saved in the output folder: its number, and the resource's own name or its kind."""
    base = uri.rstrip("/").rsplit("/", 1)[-1] if uri else ""
    if base and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}", base):
        return f"{index:02d}-{base}"
    return f"{index:02d}-{kind}{mimetypes.guess_extension(mime, strict=False) or '.bin'}"


def _save(output_dir: Path, name: str, data: str) -> str | None:
    """Decode base64 ``data`` into ``output_dir/name``; None when it is not base64."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / name).write_bytes(raw)
    return name


def _part_text(index: int, part: Any, output_dir: Path) -> str | None:
    """What one content part adds to the result's text (a file part: saved, and listed below the text)."""
    from mcp_types import AudioContent, EmbeddedResource, ImageContent, ResourceLink, TextContent, TextResourceContents

    if isinstance(part, TextContent):
        return part.text
    if isinstance(part, (ImageContent, AudioContent)):
        name = _save(output_dir, _file_name(index, part.type, part.mime_type), part.data)
        return None if name else f"[{part.type} part {index}: its data is not base64; dropped]"
    if isinstance(part, ResourceLink):
        details = ", ".join(x for x in (part.name, part.mime_type, part.description) if x)
        return f"[resource link: {part.uri}{f' ({details})' if details else ''}]"
    if isinstance(part, EmbeddedResource):
        resource = part.resource
        mime = resource.mime_type or "unknown type"
        if isinstance(resource, TextResourceContents):
            return f"[resource {resource.uri} ({mime}):]\n{resource.text}"
        name = _save(output_dir, _file_name(index, "resource", resource.mime_type or "", str(resource.uri)),
                     resource.blob)
        return (f"[resource {resource.uri} ({mime}): saved as {output_dir / name}]" if name
                else f"[resource {resource.uri} ({mime}): its data is not base64; dropped]")
    return f"[a {getattr(part, 'type', type(part).__name__)} part zagent does not know; left out]"


def to_result(result: mcp_types.CallToolResult, context: BuiltinContext, duration: float) -> ToolResult:
    """A ``tools/call`` result as the model receives it: text parts joined; images, audio and
    embedded files saved in the call's output folder and attached like a folder tool's
    ``attach_outputs``; links and resources described; ``structuredContent`` as JSON when
    there is no text; capped like any result, the whole kept on disk."""
    from mcp_types import TextContent

    assert context.call_dir is not None  # runs_process says every call has its folder
    output_dir = context.call_dir / "output"
    texts = [text for index, part in enumerate(result.content, start=1)
             if (text := _part_text(index, part, output_dir)) is not None]
    structured = storable_json(result.structured_content)
    problem = json_problem(structured, "structuredContent", MAX_STRUCTURED_BYTES) if structured is not None else None
    if problem is not None:
        texts.append(f"[{problem}; it was not kept]")
        structured = None
    elif structured is not None and not any(isinstance(p, TextContent) for p in result.content):
        texts.append(json.dumps(structured, ensure_ascii=False, indent=2))
    text = "\n".join(texts)
    if not text and not any(output_dir.iterdir()):
        text = "(the tool returned no content)"
    data = text.encode("utf-8", "replace")
    outcome = ProcessOutcome(pid=None, returncode=0, timed_out=False, stdout=data, stdout_total=len(data),
                             stderr=b"", stderr_total=0, spilled=None, duration=duration)
    built = build_result(outcome, output_mode="text", timeout=None, attach_outputs=True,
                         paths=CallPaths(context.call_dir, output_dir), cwd=context.workspace,
                         caps=context.config.capabilities, limits=context.config.limits)
    return built.model_copy(update={"is_error": bool(result.is_error), "exit_code": None, "pid": None,
                                    "structured": structured})
