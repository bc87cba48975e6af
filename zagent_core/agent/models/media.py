"""The files a tool result attached, read for a request to the model.

The journal keeps a reference to each file (path, MIME type, size, sha256), never its
bytes: a request, a resumed conversation and a replay read the same files from the call
folders. Two filters decide what a request carries, and what is not sent is explained in
words the model reads at the end of the tool result (the rest of the result still arrives):

- :func:`within_capabilities`: what the model of the turn can take (``capabilities``), so a
  session resumed with another model sends only what that one takes;
- :func:`prepare_all`: what the provider's API carries (:class:`MediaPolicy`: kinds, MIME
  types, size per file, files and bytes per request, the newest kept), and whether the
  file is still there as the call made it (its sha256).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from zagent_core.agent.models import Message
from zagent_core.config import CapabilitiesConfig
from zagent_core.journal.events import Media
from zagent_core.tools.results import capability_of, media_kind


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


NOTHING = Prepared([], [])


@dataclass(frozen=True)
class MediaPolicy:
    """What a provider's API carries: the kinds in ``limits``, each up to its size in bytes
    (of the file: base64 adds a third on the wire), of a kind in ``types`` only those MIME
    types, and at most ``max_files`` files and ``max_bytes`` bytes in one request."""

    provider: str
    limits: Mapping[str, int]
    types: Mapping[str, Collection[str]]
    max_files: int
    max_bytes: int


def _shown(media: Media) -> str:
    return f"{Path(media.path).name} ({media.mime}, {media.size} bytes)"


def within_capabilities(messages: list[Message], caps: CapabilitiesConfig) -> list[Message]:
    """``messages`` with the media the model cannot take (``capabilities``) taken out, and said.

    The messages without media are the very ones given (a provider keeps each one's wire form by
    its identity), and the whole list is, when nothing is taken out: it is made for every request.
    """
    kept = messages
    for index, message in enumerate(messages):
        if not message.media:
            continue
        refused = [m for m in message.media if not getattr(caps, capability_of(m.mime) or "", False)]
        if refused:
            notes = [f"[{_shown(m)} not sent: the model cannot take {capability_of(m.mime) or m.mime} "
                     f"({capability_of(m.mime) or 'kind'}=false)]" for m in refused]
            if kept is messages:
                kept = list(messages)
            kept[index] = message.model_copy(update={"media": [m for m in message.media if m not in refused],
                                                     "content": "\n".join([message.content, *notes])})
    return kept


def prepare_all(messages: list[Message], policy: MediaPolicy) -> dict[int, Prepared]:
    """The media of each tool message (by its index in ``messages``) as ``policy`` lets one
    request carry them: the newest first, while the request has room."""
    prepared: dict[int, Prepared] = {}
    files = size = 0
    for index in range(len(messages) - 1, -1, -1):
        media = messages[index].media
        if not media:
            continue
        attachments, notes = [], []
        for item in media:
            problem = _refusal(item, policy)
            if problem is None and (files + 1 > policy.max_files or size + item.size > policy.max_bytes):
                problem = (f"not sent again: this request already carries the {files} newest files "
                           f"({size} bytes), as many as {policy.provider} takes in one request")
            data = None
            if problem is None:
                data, problem = _read(item)
            if problem is not None or data is None:
                notes.append(f"[{_shown(item)} {problem}]")
                continue
            files, size = files + 1, size + item.size
            attachments.append(Attachment(item, media_kind(item.mime) or "", base64.b64encode(data).decode("ascii")))
        prepared[index] = Prepared(attachments, notes)
    return prepared


def _refusal(item: Media, policy: MediaPolicy) -> str | None:
    """Why the provider's API cannot carry ``item``, if it cannot."""
    kind, provider = media_kind(item.mime), policy.provider
    if kind is None or kind not in policy.limits:
        return f"not sent: {provider} takes no {kind or item.mime} files"
    if kind in policy.types and item.mime not in policy.types[kind]:
        return f"not sent: {provider} takes {kind} files as {', '.join(policy.types[kind])} only"
    if item.size > policy.limits[kind]:
        return f"not sent: over the {policy.limits[kind]}-byte limit {provider} has for {kind} files"
    return None


def _read(item: Media) -> tuple[bytes | None, str | None]:
    """The file as the call made it, or why it cannot be sent."""
    try:
        data = Path(item.path).read_bytes()
    except OSError:
        return None, f"not sent: the file is no longer at {item.path}"
    if item.sha256 is not None and hashlib.sha256(data).hexdigest() != item.sha256:
        return None, f"not sent: the file at {item.path} changed since the call made it"
    return data, None
