"""The files a tool result attached, read for a request to the model.

The journal keeps a reference to each file (path, MIME type, size, sha256), never its
bytes: a request, a resumed conversation and a replay read the same files from the call
folders. A provider says which kinds its API carries and how large each may be;
:func:`prepare` reads what it can send and explains the rest, in words the model reads
at the end of the tool result (the rest of the result still arrives):

- a kind the API cannot carry (a PDF to Chat Completions);
- a file over the provider's limit for its kind;
- a file gone from disk, or changed since the call made it (its sha256 differs).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from zagent_core.events import Media
from zagent_core.results import media_kind

@dataclass(frozen=True)
class Attachment:
    """A file read for one request: its reference, and its bytes as base64."""

    media: Media
    kind: str
    data: str  # base64


@dataclass(frozen=True)
class Prepared:
    """What a tool result's media come to for one request: files to send, and what the
    model is told of the others (one line each, for the end of the result's text)."""

    attachments: list[Attachment]
    notes: list[str]

    def text_with_notes(self, text: str) -> str:
        return "\n".join([text, *self.notes]) if self.notes else text


def _name(media: Media) -> str:
    return Path(media.path).name


def prepare(media: list[Media], limits: Mapping[str, int], provider: str,
            types: Mapping[str, Collection[str]] | None = None) -> Prepared:
    """Read ``media`` for a request to ``provider`` (its name, for the notes), which carries
    the kinds in ``limits``, each up to its size in bytes, and of a kind in ``types`` only
    the MIME types listed there."""
    types = types or {}
    attachments, notes = [], []
    for item in media:
        kind = media_kind(item.mime)
        shown = f"{_name(item)} ({item.mime}, {item.size} bytes)"
        if kind is None or kind not in limits:
            notes.append(f"[{shown} not sent: {provider} takes no {kind or item.mime} files]")
            continue
        if kind in types and item.mime not in types[kind]:
            notes.append(f"[{shown} not sent: {provider} takes {kind} files as {', '.join(types[kind])} only]")
            continue
        if item.size > limits[kind]:
            notes.append(f"[{shown} not sent: over the {limits[kind]}-byte limit {provider} has for {kind} files]")
            continue
        path = Path(item.path)
        try:
            data = path.read_bytes()
        except OSError:
            notes.append(f"[{shown} not sent: the file is no longer at {item.path}]")
            continue
        if item.sha256 is not None and hashlib.sha256(data).hexdigest() != item.sha256:
            notes.append(f"[{shown} not sent: the file at {item.path} changed since the call made it]")
            continue
        attachments.append(Attachment(item, kind, base64.b64encode(data).decode("ascii")))
    return Prepared(attachments, notes)
