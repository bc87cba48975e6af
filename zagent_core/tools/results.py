"""Turning a finished process into what the model receives.

Text tools: stdout and stderr, in order, are the result, and a non-zero exit marks it
an error. JSON tools: stdout is one object ``{"output", "is_error", "media", "state",
"structured", "outcome"}``; anything else is an error that quotes what was printed. Either way the text is capped
(tail kept, since errors and summaries come last) with a marker saying how much was cut
and where the whole of it is, and every file of the output folder is listed.
"""

from __future__ import annotations

import json
import math
import mimetypes
import os
import signal as signals
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from zagent_core.config import CapabilitiesConfig, LimitsConfig
from zagent_core.journal.events import Media, Outcome, OutputFile
from zagent_core.tools.processes import create_fresh, file_sha256
from zagent_core.tools.runner import ProcessOutcome
from zagent_core.tools.text import storable, storable_json
from zagent_core.tools.validation import STRUCTURED, schema_problems

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

#: JSON tools may print more than the model's cap (the cap applies to their ``output``).
JSON_STDOUT_LIMIT = 8 * 1024 * 1024
FULL_OUTPUT_NAME = "full_output.txt"
_QUOTE = 400
#: Files a result records in full (the rest of the output folder is counted); also media entries checked.
MAX_RECORDED_FILES = 1000
#: Problems with media entries reported one by one; the rest are counted.
_MAX_PROBLEMS = 10
#: How far into the kept tail a cut may move to start at a whole line.
_LINE_SNAP = 256

_CAPABILITY_OF = {"image": "vision", "pdf": "pdf", "audio": "audio", "video": "video"}
#: A tool-state value, as JSON, may be this big at most; a key this long; one call's writes this big in all.
MAX_STATE_VALUE_BYTES = 64 * 1024
MAX_STATE_KEY_CHARS = 256
MAX_STATE_WRITE_BYTES = 1024 * 1024
#: A result's ``structured`` value, as JSON, may be this big at most (it is journaled with the result).
MAX_STRUCTURED_BYTES = 256 * 1024
#: An outcome's reason is cut to this many characters.
MAX_REASON_CHARS = 1000


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
    #: Writes to the tool's durable state (``None`` removes a key), journaled with the result.
    state_writes: dict[str, Any] = {}
    #: The result as data, for programs (``mcp serve``'s ``structuredContent``), and what the tool says it came to.
    structured: Any = None
    outcome: Outcome | None = None

    def event_fields(self) -> dict[str, Any]:
        """The fields a ``tool_call_finished`` / ``task_exited`` / ``task_killed`` event records."""
        return self.model_dump(exclude={"media", "files", "state_writes", "outcome"}) | {
            "media": self.media, "files": self.files, "outcome": self.outcome}


def state_problem(key: Any, value: Any) -> str | None:
    """Why a tool-state write cannot be stored, or None."""
    if not isinstance(key, str) or not key:
        return f"tool state keys are non-empty strings, not {_quoted(key)}"
    if len(key) > MAX_STATE_KEY_CHARS:
        return f"tool state key {_quoted(key)[:40]}... is {len(key)} characters long, over {MAX_STATE_KEY_CHARS}"
    return json_problem(value, f'tool state "{storable(key)}": the value', MAX_STATE_VALUE_BYTES)


def json_problem(value: Any, what: str, limit: int) -> str | None:
    """Why ``value`` (``what`` names it) cannot be journaled: not plain JSON, or over ``limit`` bytes as JSON."""
    try:
        size = len(json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8"))
    except (TypeError, ValueError, RecursionError) as exc:
        return f"{what} is not plain JSON ({exc})"
    if size > limit:
        return f"{what} is {size} bytes as JSON, over the {limit}-byte limit; keep a path to a file instead"
    return None


def _state_writes(value: Any) -> tuple[dict[str, Any], list[str]]:
    """A JSON result's ``state``: the writes, or none and why (all or nothing, as a transaction)."""
    if value is None:
        return {}, []
    if not isinstance(value, dict):
        return {}, [f'"state" must be an object of keys to new values (null removes a key), not {_quoted(value)}; '
                    "no state was written"]
    writes, problems = checked_state(value)
    return (writes, []) if not problems else ({}, [*problems[:_MAX_PROBLEMS], "no state was written"])


def checked_state(writes: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """One call's tool-state writes made storable (a lone surrogate becomes U+FFFD, as in
    the rest of a result), and what is wrong with them: empty when they can be journaled."""
    writes = storable_json(writes)
    problems = [problem for key, item in writes.items() if (problem := state_problem(key, item)) is not None]
    total = len(json.dumps(writes, ensure_ascii=False).encode("utf-8")) if not problems else 0
    if total > MAX_STATE_WRITE_BYTES:
        problems.append(f"the state written is {total} bytes as JSON, over the {MAX_STATE_WRITE_BYTES}-byte limit "
                        "of one call; keep paths to files instead")
    return writes, problems


def _structured(value: Any, validator: Validator | None, is_error: bool) -> tuple[Any, list[str]]:
    """A JSON result's ``structured``: kept, or dropped with why (only a value that matches
    the manifest's ``output_schema`` is journaled)."""
    if value is None:
        if validator is not None and not is_error:
            return None, ['"structured" is missing: the manifest\'s output_schema describes it; print '
                          '{"output": "...", "structured": {...}}']
        return None, []
    value = storable_json(value)
    problem = json_problem(value, '"structured"', MAX_STRUCTURED_BYTES)
    if problem is not None:
        return None, [problem]
    problems = schema_problems(validator, value, STRUCTURED) if validator is not None else []
    if problems:
        shown = problems[:_MAX_PROBLEMS] + ([f"{len(problems) - _MAX_PROBLEMS} more"] if len(problems) > _MAX_PROBLEMS
                                            else [])
        return None, ['"structured" does not match the manifest\'s output_schema: ' + "; ".join(shown)]
    return value, []


def _outcome(value: Any) -> tuple[Outcome | None, list[str]]:
    """A JSON result's ``outcome`` (its reason cut to :data:`MAX_REASON_CHARS`), or None and why not."""
    if value is None:
        return None, []
    reason = value.get("reason", "") if isinstance(value, dict) else None
    if (not isinstance(value, dict) or value.get("status") not in ("success", "failure", "partial")
            or not isinstance(reason, str) or set(value) - {"status", "reason"}):
        return None, ['"outcome" must be {"status": "success" | "failure" | "partial", "reason": "..."}, '
                      f"not {storable(_quoted(value))}"]
    reason = storable(reason)
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[:MAX_REASON_CHARS] + f"... [cut: {len(reason)} characters in all]"
    return Outcome(status=value["status"], reason=reason), []


@dataclass(frozen=True)
class CallPaths:
    """The folders of one call."""

    call_dir: Path
    output_dir: Path


def media_kind(mime: str) -> str | None:
    """``image``, ``pdf``, ``audio`` or ``video``: the kinds of file a model may take; None for the rest."""
    if mime == "application/pdf":
        return "pdf"
    major = mime.split("/", 1)[0]
    return major if major in ("image", "audio", "video") else None


def capability_of(mime: str) -> str | None:
    """The field of ``capabilities`` that lets a model take a file of this MIME type (``vision``...), if any."""
    return _CAPABILITY_OF.get(media_kind(mime) or "")


def _sha256(path: str) -> str | None:
    """The file's sha256, which lets a later request tell that it changed (None if it cannot be read)."""
    try:
        return file_sha256(path)
    except OSError:
        return None


def _guess_mime(path: Path) -> str | None:
    return mimetypes.guess_type(path.name)[0]


def _attachable(mime: str | None, size: int, caps: CapabilitiesConfig,
                limits: LimitsConfig) -> tuple[bool, str | None]:
    """Whether a media file can go to the model, and if not, why."""
    capability = capability_of(mime or "")
    if capability is None:
        return False, f"not attached: {mime or 'unknown type'} is not an image, PDF, audio or video file"
    if not getattr(caps, capability):
        return False, f"not attached: the model cannot take {capability} ({capability}=false)"
    if size > limits.media_max_bytes:
        return False, f"not attached: {size} bytes is over the {limits.media_max_bytes}-byte media limit"
    return True, None


def cut_marker(template: str | None, default: str, *, dropped: int, where: str, path: Path | None) -> str:
    """The line that says where an output was cut: ``limits.truncation_marker`` when set, else ``default``
    (both filled in alike: ``{bytes}``, ``{where}``, ``{path}``)."""
    return (template or default).format(bytes=dropped, where=where, path=path if path is not None else "(not kept)")


def _marked_tail(tail: bytes, total: int, full: Path, template: str | None) -> tuple[str, int]:
    """The kept tail of an output of ``total`` bytes, behind a marker saying what was cut.

    The cut moves forward to the next line start when one is near, so the model does
    not read half a line as if it were whole.
    """
    newline = tail.find(b"\n", 0, _LINE_SNAP)
    if newline != -1:
        tail = tail[newline + 1:]
    dropped = total - len(tail)
    text = tail.decode("utf-8", "replace").lstrip("\ufffd")
    marker = cut_marker(template, "[{bytes} bytes cut from the start; full output: {path}]", dropped=dropped,
                        where="head", path=full)
    return f"{marker}\n{text}", dropped


def _cap_text(text: str, cap: int, paths: CallPaths, template: str | None) -> tuple[str, int, str | None]:
    """Keep the last ``cap`` bytes of ``text``; save the whole to a file when cut."""
    data = text.encode("utf-8", "replace")
    if len(data) <= cap:
        return text, 0, None
    full = paths.call_dir / FULL_OUTPUT_NAME
    with create_fresh(full) as handle:
        handle.write(data)
    marked, dropped = _marked_tail(data[-cap:], len(data), full, template)
    return marked, dropped, str(full)


def _exit_note(outcome: ProcessOutcome, timeout: float | None) -> str | None:
    if outcome.output_limit is not None:
        where = f" ({outcome.spilled})" if outcome.spilled else ""
        return (f"[stopped: its output passed {outcome.output_limit} bytes (limits.output_file_bytes); the tool and "
                f"its child processes were stopped, and the output file{where} keeps its start and its end]")
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


def _not_a_number(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is too large for a JSON number")
    return number


def _quoted(value: Any) -> str:
    """A short JSON rendering of what a tool printed, for a message about it."""
    try:
        text = json.dumps(value)
    except (ValueError, RecursionError):
        text = f"<a {type(value).__name__} nested too deeply>"
    return text if len(text) <= 80 else text[:80] + "..."


class _Parsed(NamedTuple):
    output: str
    is_error: bool
    media: list[Any]
    problem: str | None
    #: The object printed, whose ``state``, ``structured`` and ``outcome`` are checked on their own.
    value: dict[str, Any] = {}


def _parse_json_result(outcome: ProcessOutcome) -> _Parsed:
    """What a JSON tool's stdout says (a problem with it makes the result an error)."""
    stdout = _decode(outcome.stdout).strip()
    stderr = _decode(outcome.stderr).strip()
    if outcome.stdout_total > JSON_STDOUT_LIMIT:
        return _Parsed(stderr, True, [], (f"the tool printed {outcome.stdout_total} bytes, more than the "
                                  f"{JSON_STDOUT_LIMIT}-byte limit for a JSON result; full output: {outcome.spilled}"))
    if not stdout:
        if outcome.exit_code == 0 and not outcome.timed_out:
            return _Parsed(stderr, True, [], "the tool printed nothing; a JSON tool must print one object like {\"output\": \"...\"}")
        return _Parsed(stderr, True, [], None)
    quoted = stdout if len(stdout) <= _QUOTE else stdout[:_QUOTE] + "..."
    try:
        value = json.loads(stdout, parse_constant=_not_a_number, parse_float=_finite)
        output = value.get("output", "") if isinstance(value, dict) else ""
        if not isinstance(output, str):
            output = json.dumps(output, ensure_ascii=False)
    except json.JSONDecodeError as exc:
        return _Parsed(stderr, True, [], f"the tool printed invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): {quoted}")
    except ValueError as exc:  # NaN, Infinity, 1e999: what json.loads takes but JSON has no value for
        return _Parsed(stderr, True, [], (f"the tool printed JSON with {exc}; print finite numbers (or the value as a "
                                  f"string): {quoted}"))
    except RecursionError:
        return _Parsed(stderr, True, [], f"the tool printed JSON nested too deeply to read; print a flatter object: {quoted[:80]}")
    if not isinstance(value, dict):
        return _Parsed(stderr, True, [], f'the tool printed JSON that is not an object ({quoted}); expected {{"output": "..."}}')
    output = storable(output)
    if outcome.returncode != 0 and stderr:
        # It printed a result but failed: what it said on stderr is likely why.
        output = f"{output}\n{stderr}" if output else stderr
    media = value.get("media") or []
    if not isinstance(media, list):
        return _Parsed(output, True, [], '"media" must be a list of {"path": ..., "mime": ...}')
    is_error = value.get("is_error", False)
    if not isinstance(is_error, bool):
        return _Parsed(output, True, media, f'"is_error" must be true or false, not {storable(_quoted(is_error))[:40]}')
    return _Parsed(output, is_error, media, None, value)


def _walk(folder: Path) -> Iterator[os.DirEntry[str]]:
    """The files under ``folder``, in path order, without following links to folders."""
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                yield from _walk(Path(entry.path))
            elif entry.is_file():
                yield entry
        except OSError:
            continue  # gone since the listing


def _output_file(path: Path, size: int, mime: str | None, attach: bool, caps: CapabilitiesConfig,
                 limits: LimitsConfig) -> OutputFile:
    """A file as the result records it; one whose name is not UTF-8 is listed (its name mended), never attached."""
    name = storable(str(path))
    attached, note = False, None
    if name != str(path):
        note = "not attached: its name is not valid UTF-8"
    elif attach:
        attached, note = _attachable(mime, size, caps, limits)
    return OutputFile(path=name, size=size, mime=None if mime is None else storable(mime), attached=attached,
                      note=note)


@dataclass
class _Files:
    """The files of a result: the first ``MAX_RECORDED_FILES`` in full, the rest counted."""

    items: list[OutputFile]
    more: int = 0
    more_bytes: int = 0


def _collect_files(output_dir: Path, attach: bool, caps: CapabilitiesConfig, limits: LimitsConfig) -> _Files:
    files = _Files([])
    if not output_dir.is_dir():
        return files
    root = output_dir.resolve()
    for entry in _walk(output_dir):
        try:
            size = entry.stat().st_size
            if len(files.items) >= MAX_RECORDED_FILES:
                files.more, files.more_bytes = files.more + 1, files.more_bytes + size
                continue
            path = Path(entry.path)
            inside = path.resolve().is_relative_to(root)
        except (OSError, ValueError):
            continue  # gone since the listing, or a name the OS refuses
        mime = _guess_mime(path)
        if not inside:
            files.items.append(OutputFile(path=storable(str(path)), size=size, mime=mime,
                                          note="not attached: a link to a file outside the output folder"))
        else:
            files.items.append(_output_file(path, size, mime, attach and capability_of(mime or "") is not None,
                                            caps, limits))
    return files


def _media_from_json(entries: list[Any], workdir: Path, roots: tuple[Path, ...], caps: CapabilitiesConfig,
                     limits: LimitsConfig) -> tuple[list[OutputFile], list[str]]:
    """Check the media a JSON tool named; returns them as files plus problems (the first few, then a count).

    Only files inside ``roots`` (the output folder, the working folder) are attached: a
    tool cannot send the model an arbitrary file of the machine by naming it.
    """
    found: list[OutputFile] = []
    problems: list[str] = []
    dropped = 0
    resolved_roots = [root.resolve() for root in roots]
    for entry in entries:
        problem, item = _media_entry(entry, workdir, resolved_roots, caps, limits)
        if item is not None and len(found) < MAX_RECORDED_FILES:
            found.append(item)
        elif item is not None or len(problems) >= _MAX_PROBLEMS:
            dropped += 1
        elif problem is not None:
            problems.append(storable(problem))
    if dropped:
        problems.append(f"[{dropped} more media entries not checked or listed: at most {_MAX_PROBLEMS} problems "
                        f"and {MAX_RECORDED_FILES} files are reported]")
    return found, problems


def _media_entry(entry: Any, workdir: Path, roots: list[Path], caps: CapabilitiesConfig,
                 limits: LimitsConfig) -> tuple[str | None, OutputFile | None]:
    """One media entry of a JSON result: ``(problem, None)`` or ``(None, file)``."""
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        return f"media entry {_quoted(entry)} is not {{\"path\": ..., \"mime\": ...}}; ignored", None
    path = Path(entry["path"])
    path = path if path.is_absolute() else workdir / path
    shown = storable(str(path))[:200]
    try:
        if not path.is_file():
            return f"media file {shown} does not exist; not attached", None
        size = path.stat().st_size
        resolved = path.resolve()
    except (OSError, ValueError) as exc:
        return f"media file {shown} cannot be read ({exc.__class__.__name__}); not attached", None
    if not any(resolved.is_relative_to(root) for root in roots):
        return f"media file {shown} is outside the output folder and the working folder; not attached", None
    mime = entry.get("mime") if isinstance(entry.get("mime"), str) else _guess_mime(path)
    return None, _output_file(path, size, mime, True, caps, limits)


def _limit_attachments(files: list[OutputFile], limits: LimitsConfig) -> list[OutputFile]:
    """Attach files in order while the count and total size allow; list the rest as not attached."""
    count = total = 0
    kept: list[OutputFile] = []
    for item in files:
        if item.attached:
            if count >= limits.max_attachments:
                item = item.model_copy(update={"attached": False, "note": (
                    f"not attached: a result attaches at most {limits.max_attachments} files")})
            elif total + item.size > limits.attachments_max_bytes:
                item = item.model_copy(update={"attached": False, "note": (
                    f"not attached: the attachments of a result total at most {limits.attachments_max_bytes} bytes")})
            else:
                count, total = count + 1, total + item.size
        kept.append(item)
    return kept


def _describe_file(item: OutputFile) -> str:
    details = [item.mime or "unknown type", f"{item.size} bytes"]
    if item.attached:
        details.append("attached")
    elif item.note:
        details.append(item.note)
    return f"- {item.path} ({', '.join(details)})"


def _fit(lines: list[str], budget: int, summary: Callable[[int], str]) -> list[str]:
    """As many of ``lines`` as fit in ``budget`` bytes, then ``summary(how many were left out)``."""
    kept: list[str] = []
    used = 0
    for index, line in enumerate(lines):
        size = len(line.encode()) + 1
        if used + size > budget:
            return kept + [summary(len(lines) - index)]
        kept.append(line)
        used += size
    return kept


def _additions(problems: list[str], endings: list[str], files: _Files, output_dir: Path, budget: int) -> list[str]:
    """What zagent adds below the tool's text, within ``budget`` bytes: the problems with its
    result (the first ones, then a count), how it ended (always), and its files (the first
    ones, then a count)."""
    lines = _fit(problems, budget // 2, lambda left: f"[{left} more problems not shown]") + endings
    if not files.items:
        return lines
    folder = storable(str(output_dir))

    def summary(left: int) -> str:
        size = sum(f.size for f in files.items[len(files.items) - left:]) + files.more_bytes
        return f"- ... and {left + files.more} more files ({size} bytes in all) in {folder}"

    used = sum(len(line.encode()) + 1 for line in lines) + len("Files:\n")
    listing = _fit([_describe_file(f) for f in files.items], max(0, budget - used), summary)
    if files.more and len(listing) == len(files.items):
        listing.append(summary(0))
    return lines + ["Files:"] + listing


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
    output_validator: Validator | None = None,
) -> ToolResult:
    """The result of a call, from its finished process.

    What zagent adds to the tool's text (problems with its result, how it ended, its
    files) is kept within half the output cap, and the text within the rest.
    ``output_validator`` checks a JSON result's ``structured`` (the manifest's ``output_schema``).
    """
    if outcome.start_error is not None:
        return ToolResult(output=storable(outcome.start_error), is_error=True,
                          duration_ms=round(outcome.duration * 1000))

    problems: list[str] = []
    endings: list[str] = []
    named: list[OutputFile] = []
    state_writes: dict[str, Any] = {}
    structured: Any = None
    reported: Outcome | None = None
    if output_mode == "json":
        parsed = _parse_json_result(outcome)
        text, is_error = parsed.output, parsed.is_error
        named, problems = _media_from_json(parsed.media, cwd, (paths.output_dir, cwd), caps, limits)
        if parsed.problem:
            endings.append(f"[{parsed.problem}]")
            is_error = True
        state_writes, state_problems = _state_writes(parsed.value.get("state"))
        structured, structured_problems = _structured(parsed.value.get("structured"), output_validator,
                                                      is_error or parsed.problem is not None or outcome.returncode != 0)
        reported, outcome_problems = _outcome(parsed.value.get("outcome"))
        for kind in (state_problems, structured_problems, outcome_problems):
            if kind:
                endings.append(f"[{'; '.join(kind)}]")
                is_error = True
        if not text.strip() and structured is not None:
            # The model reads text only: a result that is all data is shown as its JSON.
            text = json.dumps(structured, ensure_ascii=False)
    else:
        text = _decode(outcome.stdout)
        is_error = False
    exit_note = _exit_note(outcome, timeout)
    if exit_note:
        is_error = True
        endings.append(exit_note)

    # A file the JSON result names is attached even without attach_outputs.
    named_by_path = {f.path: f for f in named}
    found = _collect_files(paths.output_dir, attach_outputs, caps, limits)
    listed = [named_by_path.pop(f.path, f) for f in found.items] + list(named_by_path.values())
    files = _Files(_limit_attachments(listed, limits), found.more, found.more_bytes)
    media = [Media(path=f.path, mime=f.mime or "application/octet-stream", size=f.size, sha256=_sha256(f.path))
             for f in files.items if f.attached]

    cap = limits.output_cap_bytes
    added = _additions(problems, endings, files, paths.output_dir, cap // 2)
    room = cap - sum(len(line.encode()) + 1 for line in added)
    # Text tools were captured at the cap already; the spill file is their full output.
    if output_mode == "text" and outcome.spilled is not None:
        text, dropped = _marked_tail(outcome.stdout[-room:], outcome.stdout_total, outcome.spilled,
                                     limits.truncation_marker)
        full_path: str | None = str(outcome.spilled)
    else:
        text, dropped, full_path = _cap_text(text, room, paths, limits.truncation_marker)

    if not text.strip() and not added:
        text = "(the tool printed nothing)"
    parts = [text.rstrip("\n")] if text.strip() else []
    return ToolResult(
        output="\n".join(parts + added),
        is_error=is_error,
        pid=outcome.pid,
        exit_code=outcome.exit_code,
        timed_out=outcome.timed_out,
        duration_ms=round(outcome.duration * 1000),
        truncated_bytes=dropped,
        full_output_path=full_path,
        media=media,
        files=files.items,
        state_writes=state_writes,
        structured=structured,
        outcome=reported,
    )
