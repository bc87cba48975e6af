"""What the file built-ins share: the content hash, the read-before-edit gate, atomic
writes, binary detection and the numbered-lines rendering.

Every file is reached through a :class:`~zagent_core.builtins.beneath.Place` (the folder
holding it, open, and its name there), never by its path: see ``beneath.py``.

The hash is XXH3-64 of the file's bytes, written ``xxh3:`` and 16 hex digits: 64 bits, so
the gate is not betting on a 32-bit birthday bound, the same on every machine (a journal
moves between them), and computed by the ``xxhash`` C extension at memory speed (over
10 GB/s, where SHA-256 ran at 2 GB/s and cost as much as the read itself: see
bench/builtin_files.py; FNV lanes written in Python would be far slower still). It guards
against a file changing under the model, not against an adversary, so it need not be
cryptographic; the hashes shown to people (media, tool folders) stay SHA-256. Journals
written before it hold the first 16 hex digits of SHA-256, no prefix: an entry is compared
in the algorithm it was written with (:func:`same_content`), so an old session resumed does
not take every file it read for changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import secrets
import shlex
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import xxhash

from zagent_core.builtins.beneath import Place, place
from zagent_core.journal.events import ReadEntry
from zagent_core.tools.inprocess import BuiltinContext, PathRefused, unusable_path
from zagent_core.tools.results import ToolResult

#: Lines a read shows at most, unless the call asks for another ``limit``.
DEFAULT_LINE_LIMIT = 2000
#: Bytes of file text one read_file result shows at most.
READ_BYTE_CAP = 256 * 1024
#: Leading bytes looked at to tell a binary file from text.
BINARY_SAMPLE = 8192
#: Share of U+FFFD in the decoded sample above which the file is taken for binary.
BINARY_REPLACEMENT_SHARE = 0.10
#: Files larger than this are never read whole: read_file reads only the slice it shows, the edit tools refuse them.
WHOLE_FILE_CAP = 64 * 1024 * 1024
#: Bytes hashed (or scanned) at a time, so a file of any size costs one chunk of memory.
STREAM_CHUNK = 1024 * 1024
#: From this many refusals in a row on, the gate says something outside the session rewrites the file.
REWRITER_REFUSALS = 2


#: The ``path`` parameter of every file built-in.
PATH_PARAMETER: dict[str, Any] = {"type": "string", "minLength": 1,
                                  "description": "The file: absolute, or relative to the workspace."}


def change_parameters(needed: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON schema of the arguments of a built-in that changes one file: ``path`` and the ``needed``
    properties, required, then the ``optional`` ones."""
    return {"type": "object", "properties": {"path": PATH_PARAMETER, **needed, **(optional or {})},
            "required": ["path", *needed], "additionalProperties": False}


class FileProblem(Exception):
    """A call that cannot go on; the message is the model's (the result is an error)."""


#: How a hash of this algorithm begins; the entries of older journals have no prefix (SHA-256's).
HASH_PREFIX = "xxh3:"


def content_hash(data: bytes) -> str:
    """The 64-bit hash the gate compares: ``xxh3:`` and XXH3-64's 16 hex digits."""
    return stream_hash((data,))


def stream_hash(chunks: Iterable[bytes]) -> str:
    """:func:`content_hash` of the bytes ``chunks`` yield, one at a time (a large file is never held whole)."""
    digest = xxhash.xxh3_64()
    for chunk in chunks:
        digest.update(chunk)
    return HASH_PREFIX + digest.hexdigest()


def same_content(recorded: str, digest: str, chunks: Callable[[], Iterable[bytes]]) -> bool:
    """Whether the bytes ``chunks()`` yields, whose :func:`stream_hash` is ``digest``, are those
    ``recorded`` was taken of: in ``recorded``'s own algorithm, an older journal's SHA-256 too
    (only then are the bytes read again)."""
    if recorded.startswith(HASH_PREFIX):
        return recorded == digest
    sha = hashlib.sha256()
    for chunk in chunks():
        sha.update(chunk)
    return sha.hexdigest()[:16] == recorded


def same_bytes(recorded: str, data: bytes) -> bool:
    """:func:`same_content` of bytes already in hand."""
    return same_content(recorded, content_hash(data), lambda: (data,))


def now_iso() -> str:
    """Now, UTC, to the second: when the model saw a file."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def error(message: str) -> ToolResult:
    return ToolResult(output=message, is_error=True)


def located(context: BuiltinContext, shown: str, doing: str, *, make_folders: bool = False) -> Place:
    """Where the model's path ``shown`` leads (see :func:`~zagent_core.builtins.beneath.place`); a refusal
    of confinement, or a folder on the way that is missing or wrong, is a :class:`FileProblem`."""
    try:
        return place(context, shown, make_folders=make_folders)
    except PathRefused as exc:
        raise FileProblem(str(exc)) from None
    except OSError as exc:
        raise _problem(exc, None, shown, doing) from None


@contextlib.contextmanager
def open_regular(where: Place, shown: str, doing: str) -> Iterator[tuple[int, int]]:
    """A descriptor of the file at ``where`` open for reading and its size; a :class:`FileProblem` when it is
    not a regular file (a FIFO would block the read forever, a device never ends)."""
    try:
        # O_NONBLOCK: opening a FIFO without a writer must not wait for one. O_NOFOLLOW: its links
        # were followed by hand; one swapped in since is refused (ELOOP), not followed.
        fd = os.open(where.name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=where.folder)
    except OSError as exc:
        raise _problem(exc, where, shown, doing) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise _problem(IsADirectoryError(), where, shown, doing)
        if not stat.S_ISREG(info.st_mode):
            raise FileProblem(f"{shown} is {_kind(info.st_mode)}, not a regular file; the file tools only work on "
                              "regular files (look at it with shell if you must, e.g. head -c 1000)")
        yield fd, info.st_size
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    kinds = [(stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")]
    return next((name for test, name in kinds if test(mode)), "a special file")


def read_bytes(where: Place, shown: str) -> bytes:
    """The bytes of an existing regular file up to :data:`WHOLE_FILE_CAP`, or a :class:`FileProblem` saying
    what is wrong."""
    with open_regular(where, shown, "read") as (fd, size):
        if size > WHOLE_FILE_CAP:
            raise too_large(shown, size)
        try:
            with os.fdopen(os.dup(fd), "rb") as handle:
                data = handle.read(WHOLE_FILE_CAP + 1)
        except OSError as exc:
            raise _problem(exc, where, shown, "read") from None
    if len(data) > WHOLE_FILE_CAP:  # it grew since fstat
        raise too_large(shown, len(data))
    return data


def too_large(shown: str, size: int) -> FileProblem:
    return FileProblem(f"{shown} is {size / 2**20:.0f} MiB, more than the {WHOLE_FILE_CAP // 2**20} MiB the edit "
                       "tools load whole; look at it with read_file (offset/limit) or grep, and change it with shell "
                       "(e.g. sed -i)")


def _problem(exc: OSError, where: Place | None, shown: str, doing: str) -> FileProblem:
    """What the model is told when the file system refuses (``where`` is None: on the way to the file)."""
    if (unusable := unusable_path(exc)) is not None:
        return FileProblem(unusable)
    if isinstance(exc, FileNotFoundError):
        if where is None:
            return FileProblem(f"no such file: {shown} (the folder {exc.filename} does not exist either)")
        return FileProblem(f"no such file: {shown}{_siblings(where)}")
    if isinstance(exc, IsADirectoryError):
        return FileProblem(f"{shown} is a folder, not a file; list it with list_files")
    if isinstance(exc, PermissionError):
        return FileProblem(f"{shown}: permission denied (zagent runs as uid {os.getuid()})")
    return FileProblem(f"{shown}: cannot be {doing} ({exc.strerror or exc})")


def _siblings(where: Place) -> str:
    """Close names in the same folder, as a hint after "no such file"."""
    from zagent_core.problems import did_you_mean

    try:
        names = where.names()
    except OSError:
        return ""
    return did_you_mean(where.name, names)


def decode_text(data: bytes, shown: str) -> str:
    """``data`` as UTF-8 text (line endings kept), or a :class:`FileProblem` for a binary file."""
    if looks_binary(data):
        raise FileProblem(f"{shown} is a binary file ({len(data)} bytes); edits work on text files")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileProblem(f"{shown} is not UTF-8 text (byte {exc.start} cannot be decoded); "
                          "edits work on UTF-8 text files") from None


def looks_binary(data: bytes) -> bool:
    """NUL in the leading sample, or many bytes that are not UTF-8."""
    sample = data[:BINARY_SAMPLE]
    if b"\x00" in sample:
        return True
    text = sample.decode("utf-8", "replace")
    if len(sample) == BINARY_SAMPLE:
        # The sample may end inside a character: that one does not count.
        text = text[:-1]
    return bool(text) and text.count("\ufffd") / len(text) > BINARY_REPLACEMENT_SHARE


def numbered(lines: list[str], first: int) -> str:
    """Lines prefixed with their 1-based number, as ``cat -n`` prints them."""
    # One %-format of the whole slice: twice as fast as an f-string per line.
    pairs = tuple(itertools.chain.from_iterable(zip(range(first, first + len(lines)), lines)))
    return ("%6d\t%s" * len(lines)) % pairs


# -- the read-before-edit gate ------------------------------------------------------------


def gate(context: BuiltinContext, path: Path, shown: str, data: bytes) -> None:
    """Refuse to change ``path`` (which exists, with ``data``) unless the model saw these bytes.

    A refusal for drift is remembered (``stale_rejections``), so the next one in a row
    says that something outside the session keeps rewriting the file.
    """
    if not context.config.builtins.require_read_before_edit:
        return
    entry = context.seen(path)
    if entry is None:
        raise FileProblem(f"{shown} has not been read in this session; read it with read_file first, "
                          f"so the change is made to what is really there{_one_call_hint(context)}")
    if same_bytes(entry.hash, data):
        return
    refusals = entry.stale_rejections + 1
    context.remember(entry.model_copy(update={"stale_rejections": refusals}))
    if refusals >= REWRITER_REFUSALS:
        raise FileProblem(
            f"{shown} changed since you read it at {entry.at}, again ({refusals} refusals in a row): something "
            "outside this session (an editor's auto-save, a formatter, a file watcher) keeps rewriting it. "
            "Stop whatever rewrites it, or make the change with that tool in mind, then read it again")
    raise FileProblem(f"{shown} changed since you read it at {entry.at}; read it again")


def _one_call_hint(context: BuiltinContext) -> str:
    """Under ``zagent tools run`` each call is a session of its own, so no read can come first: say what can."""
    if context.origin == "tools run":
        return (" (each zagent tools run is a new session: to change files there, set "
                "builtins.require_read_before_edit to false in config.json)")
    return ""


def remember_read(context: BuiltinContext, path: Path, digest: str, offset: int, limit: int | None,
                  line_numbers: bool) -> None:
    """Stage what the model was just shown of ``path`` (its :func:`content_hash`; refusals in a row carry on)."""
    before = context.seen(path)
    context.remember(ReadEntry(path=str(path), hash=digest, offset=offset, limit=limit,
                               line_numbers=line_numbers, at=now_iso(),
                               stale_rejections=before.stale_rejections if before else 0))


def remember_write(context: BuiltinContext, path: Path, data: bytes) -> None:
    """Stage the entry of a file the call wrote: its new bytes, elided (the model's view is older)."""
    before = context.seen(path)
    context.remember(ReadEntry(
        path=str(path), hash=content_hash(data), offset=before.offset if before else 1,
        limit=before.limit if before else None, line_numbers=before.line_numbers if before else True,
        at=now_iso(), elided=True, stale_rejections=0))


# -- writing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    created: bool
    size: int


def write_atomic(where: Place, data: bytes) -> Written:
    """Replace the content of the file at ``where`` with ``data`` so a crash leaves the old file or the new one.

    The bytes go to a temporary file in the same folder, are synced, and the temporary
    file is renamed over the target; its mode is the old file's (a new file gets the
    umask's), and so is its owner where the process may set it (root may; others keep
    their own). A symlink is written through (``where`` is past it): its target changes, the
    link stays. The folder is not synced: if a power loss undoes the rename, the gate sees a
    file other than the one the journal says was written, and refuses an edit. A link
    swapped in at ``where`` meanwhile is replaced by the file, never followed.
    """
    try:
        old: os.stat_result | None = where.lstat()
    except FileNotFoundError:
        old = None
    mode = stat.S_IMODE(old.st_mode) if old and not stat.S_ISLNK(old.st_mode) else None
    _remove_orphans(where)
    fd, temporary = _temporary(where)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if old:
                # Best effort, before the mode (chown clears set-uid bits); a refusal leaves it ours.
                with contextlib.suppress(OSError):
                    os.fchown(handle.fileno(), old.st_uid, old.st_gid)
            os.fchmod(handle.fileno(), mode if mode is not None else _NEW_FILE_MODE)
            os.fsync(handle.fileno())
        os.replace(temporary, where.name, src_dir_fd=where.folder, dst_dir_fd=where.folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=where.folder)
        raise
    return Written(created=mode is None, size=len(data))


_TEMPORARY = ".zagent-tmp"


def _temporary(where: Place) -> tuple[int, str]:
    """A new file beside ``where``'s, open for writing, no one else's (``O_EXCL``), and its name."""
    while True:
        # The pid in the name tells a later write whether the writer of a leftover is dead.
        name = f".{where.name}.{os.getpid()}.{secrets.token_hex(4)}{_TEMPORARY}"
        try:
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                           dir_fd=where.folder), name
        except FileExistsError:
            continue


def _remove_orphans(where: Place) -> None:
    """Delete the temporary files a killed write of ``where``'s file left behind (their writer is dead)."""
    # Exactly the names of its temporary files: ".v." is also how ".v.3999999.<pid>..." (of v.3999999) starts.
    mine = re.compile(re.escape(f".{where.name}.") + r"(\d+)\.[a-z0-9_]{8}" + re.escape(_TEMPORARY))
    try:
        names = where.names()
    except OSError:
        return
    for name in names:
        if (match := mine.fullmatch(name)) and not _alive(int(match[1])):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=where.folder)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        pass
    return True


def _read_umask() -> int:
    # os.umask can only be read by setting it: done once, at import, before threads run calls.
    umask = os.umask(0)
    os.umask(umask)
    return umask


_NEW_FILE_MODE = 0o666 & ~_read_umask()


def write_text_checked(context: BuiltinContext, where: Place, shown: str, data: bytes) -> Written:
    """Write ``data`` atomically and stage the new entry, or a :class:`FileProblem` saying why not."""
    _refuse_read_only(where, shown)
    try:
        written = write_atomic(where, data)
    except OSError as exc:
        raise _problem(exc, where, shown, "written") from None
    remember_write(context, where.key, data)
    return written


def _refuse_read_only(where: Place, shown: str) -> None:
    """A file without any write bit, or that this process may not write, is not replaced: the rename would
    succeed (it needs only the folder), but the file says it should not change."""
    try:
        mode = where.lstat().st_mode
    except OSError:
        return
    if not mode & 0o222 or not os.access(where.name, os.W_OK, dir_fd=where.folder):
        raise FileProblem(f"{shown} is read-only (mode {stat.S_IMODE(mode):o}); it was not changed. If it should "
                          f"change, make it writable first (e.g. shell: chmod u+w {shlex.quote(shown)})")


# -- replacing strings (edit, multi_edit) -------------------------------------------------


def load_for_edit(context: BuiltinContext, where: Place, shown: str) -> str:
    """The text of the file to edit, once the gate lets the call change it."""
    try:
        data = read_bytes(where, shown)
    except FileProblem as exc:
        if not where.exists():
            raise FileProblem(f"{exc}; to create a file, use write_file") from None
        raise
    gate(context, where.key, shown, data)
    return decode_text(data, shown)


#: Lines of the file scored against old_string's first line when it is not found, at most.
_PREVIEW_SCAN_LINES = 200_000
#: Below this similarity no line is shown as "closest".
_PREVIEW_MIN_RATIO = 0.5


def check_strings(old: str, new: str) -> None:
    """Refuse a replacement that cannot change anything, before the file is even read."""
    if old == new:
        raise FileProblem("old_string and new_string are identical; there is nothing to change")
    if not old:
        raise FileProblem("old_string is empty; give the text to replace (to write a whole file, use write_file)")


def replace(text: str, old: str, new: str, replace_all: bool, shown: str) -> tuple[str, int]:
    """``text`` with ``old`` replaced by ``new`` (once, unless ``replace_all``), and how many were
    replaced; a :class:`FileProblem` when identical, empty, not found or not unique."""
    check_strings(old, new)
    count = text.count(old)
    if count == 0:
        raise FileProblem(f"old_string not found in {shown}.{nearest_match(text, old)}")
    if count > 1 and not replace_all:
        lines = _match_lines(text, old)
        where = ", ".join(map(str, lines[:20])) + (f" and {len(lines) - 20} more" if len(lines) > 20 else "")
        raise FileProblem(f"old_string occurs {count} times in {shown} (at lines {where}); include more of the "
                          "surrounding text to make it unique, or set replace_all to replace every occurrence")
    return text.replace(old, new, -1 if replace_all else 1), count if replace_all else 1


def _match_lines(text: str, old: str) -> list[int]:
    """The 1-based line of each (non-overlapping) occurrence of ``old``."""
    lines: list[int] = []
    line, position = 1, 0
    while (found := text.find(old, position)) != -1:
        line += text.count("\n", position, found)
        lines.append(line)
        line += old.count("\n")
        position = found + len(old)
    return lines


def nearest_match(text: str, old: str) -> str:
    """The lines of ``text`` closest to ``old`` (its length, starting at the line most like its
    first line), numbered, to append to "not found"; or advice when nothing is close."""
    import difflib

    wanted = old.splitlines() or [old]
    probe = next((line.strip() for line in wanted if line.strip()), "")
    lines = text.splitlines()[:_PREVIEW_SCAN_LINES]
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(probe)
    best, best_ratio = -1, _PREVIEW_MIN_RATIO
    for index, line in enumerate(lines):
        matcher.set_seq1(line.strip())
        if matcher.real_quick_ratio() > best_ratio and matcher.quick_ratio() > best_ratio:
            ratio = matcher.ratio()
            if ratio > best_ratio:
                best, best_ratio = index, ratio
    if best < 0:
        return " No line resembles its first line; read the file to see what it holds."
    window = [line + "\n" for line in lines[best:best + max(len(wanted), 1)]]
    return (f" The closest text is at line {best + 1}:\n{numbered(window, best + 1).rstrip(chr(10))}\n"
            "Check whitespace, indentation and line endings, and copy old_string from there.")
