"""Turning a finished process into what the model receives.

Text tools: stdout and stderr, in order, are the result, and a non-zero exit marks it
an error. JSON tools: stdout is one object ``{"output", "is_error", "media"}``; anything
else is an error that quotes what was printed. Either way the text is capped
(tail kept, since errors and summaries come last) with a marker saying how much was cut
and where the whole of it is, and every file of the output folder is listed.
"""

from __future__ import annotations

import json
import mimetypes
import signal as signals
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from zagent_core.config import CapabilitiesConfig, LimitsConfig
from zagent_core.events import Media, OutputFile
from zagent_core.runner import ProcessOutcome

#: JSON tools may print more than the model's cap (the cap applies to their ``output``).
JSON_STDOUT_LIMIT = 8 * 1024 * 1024
FULL_OUTPUT_NAME = "full_output.txt"
_QUOTE = 400
#: How far into the kept tail a cut may move to start at a whole line.
_LINE_SNAP = 256

_CAPABILITY_OF = {"image": "vision", "audio": "audio", "video": "video"}


class ToolResult(BaseModel):
    """What a call produced, as the model receives it and the journal records it."""

    model_config = ConfigDict(frozen=True)

    output: str
    is_error: bool
    exit_code: int | None = None
    timed_out: bool = False
    duration_ms: int = 0
    truncated_bytes: int = 0
    full_output_path: str | None = None
    media: list[Media] = []
    files: list[OutputFile] = []
    pid: int | None = None

    def event_fields(self) -> dict[str, Any]:
        """The fields a ``tool_call_finished`` / ``task_exited`` / ``task_killed`` event records."""
        return self.model_dump(exclude={"media", "files"}) | {"media": self.media, "files": self.files}


@dataclass(frozen=True)
class CallPaths:
    """The folders of one call."""

    call_dir: Path
    output_dir: Path


def _capability(mime: str) -> str | None:
    if mime == "application/pdf":
        return "pdf"
    return _CAPABILITY_OF.get(mime.split("/", 1)[0])


def _guess_mime(path: Path) -> str | None:
    return mimetypes.guess_type(path.name)[0]


def _attachable(mime: str | None, size: int, caps: CapabilitiesConfig,
                limits: LimitsConfig) -> tuple[bool, str | None]:
    """Whether a media file can go to the model, and if not, why."""
    capability = _capability(mime or "")
    if capability is None:
        return False, f"not attached: {mime or 'unknown type'} is not an image, PDF, audio or video file"
    if not getattr(caps, capability):
        return False, f"not attached: the model cannot take {capability} ({capability}=false)"
    if size > limits.media_max_bytes:
        return False, f"not attached: {size} bytes is over the {limits.media_max_bytes}-byte media limit"
    return True, None


def _marked_tail(tail: bytes, total: int, full: Path) -> tuple[str, int]:
    """The kept tail of an output of ``total`` bytes, behind a marker saying what was cut.

    The cut moves forward to the next line start when one is near, so the model does
    not read half a line as if it were whole.
    """
    newline = tail.find(b"\n", 0, _LINE_SNAP)
    if newline != -1:
        tail = tail[newline + 1:]
    dropped = total - len(tail)
    text = tail.decode("utf-8", "replace").lstrip("\ufffd")
    return f"[{dropped} bytes cut from the start; full output: {full}]\n{text}", dropped


def _cap_text(text: str, cap: int, paths: CallPaths) -> tuple[str, int, str | None]:
    """Keep the last ``cap`` bytes of ``text``; save the whole to a file when cut."""
    data = text.encode("utf-8", "replace")
    if len(data) <= cap:
        return text, 0, None
    full = paths.call_dir / FULL_OUTPUT_NAME
    full.write_bytes(data)
    marked, dropped = _marked_tail(data[-cap:], len(data), full)
    return marked, dropped, str(full)


def _exit_note(outcome: ProcessOutcome, timeout: float | None) -> str | None:
    if outcome.timed_out:
        return (f"[timed out after {timeout:g} s: the tool and its child processes were stopped; "
                "the output above is what it printed until then]")
    if outcome.signal is not None:
        try:
            name = signals.Signals(outcome.signal).name
        except ValueError:
            name = f"signal {outcome.signal}"
        return f"[killed by {name}]"
    if outcome.exit_code:
        return f"[exit code {outcome.exit_code}]"
    return None


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _parse_json_result(outcome: ProcessOutcome) -> tuple[str, bool, list[Any], str | None]:
    """``(output, is_error, media entries, problem)`` from a JSON tool's stdout."""
    stdout = _decode(outcome.stdout).strip()
    stderr = _decode(outcome.stderr).strip()
    if outcome.stdout_total > JSON_STDOUT_LIMIT:
        return stderr, True, [], (f"the tool printed {outcome.stdout_total} bytes, more than the "
                                  f"{JSON_STDOUT_LIMIT}-byte limit for a JSON result; full output: {outcome.spilled}")
    if not stdout:
        if outcome.exit_code == 0 and not outcome.timed_out:
            return stderr, True, [], "the tool printed nothing; a JSON tool must print one object like {\"output\": \"...\"}"
        return stderr, True, [], None
    try:
        value = json.loads(stdout)
    except json.JSONDecodeError as exc:
        quoted = stdout if len(stdout) <= _QUOTE else stdout[:_QUOTE] + "..."
        return stderr, True, [], f"the tool printed invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): {quoted}"
    if not isinstance(value, dict):
        return stderr, True, [], f'the tool printed JSON that is not an object ({stdout[:_QUOTE]}); expected {{"output": "..."}}'
    output = value.get("output", "")
    if not isinstance(output, str):
        output = json.dumps(output, ensure_ascii=False)
    if outcome.returncode != 0 and stderr:
        # It printed a result but failed: what it said on stderr is likely why.
        output = f"{output}\n{stderr}" if output else stderr
    media = value.get("media") or []
    if not isinstance(media, list):
        return output, True, [], '"media" must be a list of {"path": ..., "mime": ...}'
    is_error = value.get("is_error", False)
    if not isinstance(is_error, bool):
        return output, True, media, f'"is_error" must be true or false, not {json.dumps(is_error)[:40]}'
    return output, is_error, media, None


def _collect_files(output_dir: Path, attach: bool, caps: CapabilitiesConfig,
                   limits: LimitsConfig) -> list[OutputFile]:
    files: list[OutputFile] = []
    if not output_dir.is_dir():
        return files
    root = output_dir.resolve()
    for path in sorted(output_dir.rglob("*")):
        try:
            if not path.is_file():
                continue
            size = path.stat().st_size
            inside = path.resolve().is_relative_to(root)
        except OSError:
            continue  # gone since the listing, or a name the OS refuses
        mime = _guess_mime(path)
        attached, note = (False, None)
        if not inside:
            note = "not attached: a link to a file outside the output folder"
        elif attach and _capability(mime or ""):
            attached, note = _attachable(mime, size, caps, limits)
        files.append(OutputFile(path=str(path), size=size, mime=mime, attached=attached, note=note))
    return files


def _media_from_json(entries: list[Any], workdir: Path, roots: tuple[Path, ...], caps: CapabilitiesConfig,
                     limits: LimitsConfig) -> tuple[list[OutputFile], list[str]]:
    """Check the media a JSON tool named; returns them as files plus problems.

    Only files inside ``roots`` (the output folder, the working folder) are attached: a
    tool cannot send the model an arbitrary file of the machine by naming it.
    """
    found: list[OutputFile] = []
    problems: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            problems.append(f"media entry {json.dumps(entry)[:80]} is not {{\"path\": ..., \"mime\": ...}}; ignored")
            continue
        path = Path(entry["path"])
        path = path if path.is_absolute() else workdir / path
        try:
            if not path.is_file():
                problems.append(f"media file {path} does not exist; not attached")
                continue
            size = path.stat().st_size
            resolved = path.resolve()
        except (OSError, ValueError) as exc:
            problems.append(f"media file {str(path)[:200]} cannot be read ({exc.__class__.__name__}); not attached")
            continue
        if not any(resolved.is_relative_to(root.resolve()) for root in roots):
            problems.append(f"media file {path} is outside the output folder and the working folder; not attached")
            continue
        mime = entry.get("mime") if isinstance(entry.get("mime"), str) else _guess_mime(path)
        attached, note = _attachable(mime, size, caps, limits)
        found.append(OutputFile(path=str(path), size=size, mime=mime, attached=attached, note=note))
    return found, problems


def _describe_file(item: OutputFile) -> str:
    details = [item.mime or "unknown type", f"{item.size} bytes"]
    if item.attached:
        details.append("attached")
    elif item.note:
        details.append(item.note)
    return f"- {item.path} ({', '.join(details)})"


def build_result(
    outcome: ProcessOutcome,
    *,
    output_mode: str,
    timeout: float | None,
    attach_outputs: bool,
    paths: CallPaths,
    cwd: Path,
    caps: CapabilitiesConfig,
    limits: LimitsConfig,
) -> ToolResult:
    """The result of a call, from its finished process."""
    if outcome.start_error is not None:
        return ToolResult(output=outcome.start_error, is_error=True, duration_ms=round(outcome.duration * 1000))

    notes: list[str] = []
    named: list[OutputFile] = []
    if output_mode == "json":
        text, is_error, media_entries, problem = _parse_json_result(outcome)
        named, media_problems = _media_from_json(media_entries, cwd, (paths.output_dir, cwd), caps, limits)
        notes += media_problems
        if problem:
            notes.append(f"[{problem}]")
            is_error = True
    else:
        text = _decode(outcome.stdout)
        is_error = False
    exit_note = _exit_note(outcome, timeout)
    if exit_note:
        is_error = True
        notes.append(exit_note)

    # Text tools were captured at the cap already; the spill file is their full output.
    if output_mode == "text" and outcome.spilled is not None:
        text, dropped = _marked_tail(outcome.stdout, outcome.stdout_total, outcome.spilled)
        full_path: str | None = str(outcome.spilled)
    else:
        text, dropped, full_path = _cap_text(text, limits.output_cap_bytes, paths)

    # A file the JSON result names is attached even without attach_outputs.
    named_by_path = {f.path: f for f in named}
    files = [named_by_path.pop(f.path, f) for f in _collect_files(paths.output_dir, attach_outputs, caps, limits)]
    files += named_by_path.values()
    media = [Media(path=f.path, mime=f.mime or "application/octet-stream", size=f.size) for f in files if f.attached]

    if not text.strip() and not notes and not files:
        text = "(the tool printed nothing)"
    parts = [text.rstrip("\n")] if text.strip() else []
    parts += notes
    if files:
        parts.append("Files:")
        parts += [_describe_file(f) for f in files]
    return ToolResult(
        output="\n".join(parts),
        is_error=is_error,
        pid=outcome.pid,
        exit_code=outcome.exit_code,
        timed_out=outcome.timed_out,
        duration_ms=round(outcome.duration * 1000),
        truncated_bytes=dropped,
        full_output_path=full_path,
        media=media,
        files=files,
    )
