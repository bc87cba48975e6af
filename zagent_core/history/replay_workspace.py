"""The workspace of a replay: the fresh copy a rerun runs its tools in (:func:`copy_workspace`,
which reads nothing outside the workspace and writes nothing through it), what the copy
says of the recording (paths moved into it, files no longer what the session first read),
and the replay's own folder under the home (:func:`replay_folder`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from zagent_core.home import Home
from zagent_core.journal.events import ReadStateUpdated
from zagent_core.journal.protocol import StoredEvent
from zagent_core.tools.processes import ProcessIdentity, boot_id


def changed_since(events: Iterable[StoredEvent], workspace_then: str | None, workspace: Path) -> str | None:
    """A note naming the files of the workspace copy that are not what the recording first
    read: a rerun from them reads something else, and diverges for that reason alone."""
    from zagent_core.builtins.files import same_bytes

    changed = []
    for path, digest in _first_read(events).items():
        now = Path(moved(path, workspace_then, workspace)) if workspace_then else None
        if digest is None or now is None or not now.is_relative_to(workspace):
            continue  # written before it was read, or outside the workspace: the copy says nothing of it
        try:
            same = same_bytes(digest, now.read_bytes())
        except OSError:
            same = False
        if not same:
            changed.append(str(now.relative_to(workspace)))
    if not changed:
        return None
    return (f"{len(changed)} file(s) of the workspace are not what the recording first read "
            f"({', '.join(changed[:5])}{', ...' if len(changed) > 5 else ''}): the rerun starts from the workspace "
            "as it is now; give a checkout of its state when the session began with --workspace DIR")


def _first_read(events: Iterable[StoredEvent]) -> dict[str, str | None]:
    """Each path the recording read, with the hash of what it first read there (None: the session wrote it first)."""
    first: dict[str, str | None] = {}
    for stored in events:
        if isinstance(stored.event, ReadStateUpdated):
            for entry in stored.event.entries:
                first.setdefault(entry.path, None if entry.elided else entry.hash)
    return first


def moved(path: str, then: str, now: Path) -> str:
    """``path``, of the workspace ``then``, in the workspace ``now`` (a path outside ``then`` stays as it is)."""
    relative = os.path.relpath(path, then)
    return path if relative == ".." or relative.startswith("../") else os.path.normpath(os.path.join(now, relative))

#: A workspace larger than this is not copied for a rerun (the replay says so).
MAX_WORKSPACE_BYTES = 200 * 1024 * 1024
#: Folders a rerun can do without: environments and caches that are made again.
_SKIP = {".venv", "venv", "node_modules", "__pycache__"}
#: A git repository's own folder. Copied, so a rerun's tools see the repository they saw (a
#: git server's --repository ., git diff in a shell call), but after the rest of the workspace
#: and only while it fits in what the rest leaves of the bound: a big history must not cost
#: the copy of the files the tools work on.
_REPOSITORY = ".git"
#: How many of the things a copy left out the report names.
_NAMED_SKIPS = 10


class _TooLarge(Exception):
    pass


class _WorkspaceCopy:
    """A copy of a workspace for a rerun, that reads nothing outside it and writes nothing
    through it: folders and regular files are copied (with their modes and times), a link
    is copied as a link when it leads to something inside the workspace (and then leads
    to the same thing inside the copy), and everything else is left out with the reason.
    The size counted is that of what is copied, so no link can smuggle ``/usr`` in.
    """

    def __init__(self, source: Path, excluded: set[Path]) -> None:
        self.source = source
        self.excluded = excluded
        self.folders: list[Path] = []
        self.files: list[Path] = []
        self.links: list[tuple[Path, str]] = []
        self.left_out: list[str] = []
        self.size = 0

    def plan(self) -> None:
        """Walk the workspace, never following a link, then its repositories while they fit; raises _TooLarge."""
        for repository in self._walk(Path()):
            kept = len(self.folders), len(self.files), len(self.links), len(self.left_out), self.size
            self.folders.append(repository)
            try:
                self._walk(repository)
            except _TooLarge:
                del self.folders[kept[0]:], self.files[kept[1]:], self.links[kept[2]:], self.left_out[kept[3]:]
                self.size = kept[4]
                self.left_out.append(f"{repository} (the repository would take the copy past {MAX_WORKSPACE_BYTES} "
                                     "bytes: a rerun's git sees none)")

    def _walk(self, start: Path) -> list[Path]:
        """Plan the folder ``start`` and what it holds; the repositories met, left for later. Raises _TooLarge."""
        repositories = []
        pending = [start]
        while pending:
            folder = pending.pop()
            try:
                entries = sorted(os.scandir(self.source / folder), key=lambda entry: entry.name)
            except OSError as exc:
                self.left_out.append(f"{folder} ({exc.strerror})")
                continue
            for entry in entries:
                relative = folder / entry.name
                if entry.is_symlink():
                    self._plan_link(relative)
                elif entry.is_dir(follow_symlinks=False):
                    if entry.name == _REPOSITORY and start == Path():
                        repositories.append(relative)
                    elif entry.name not in _SKIP and self.source / relative not in self.excluded:
                        self.folders.append(relative)
                        pending.append(relative)
                elif entry.is_file(follow_symlinks=False):
                    self._plan_file(relative, entry)
                else:
                    self.left_out.append(f"{relative} (not a file, folder or link: a FIFO, socket or device)")
        return repositories

    def _plan_file(self, relative: Path, entry: os.DirEntry[str]) -> None:
        if entry.name == _REPOSITORY and (elsewhere := self._repository_elsewhere(relative)) is not None:
            # A worktree's or a submodule's ".git" file names its repository: one outside the
            # workspace would be written to by the rerun's git.
            self.left_out.append(f"{relative} (names the repository {elsewhere}, outside the workspace)")
            return
        with contextlib.suppress(OSError):
            self.size += entry.stat(follow_symlinks=False).st_size
        if self.size > MAX_WORKSPACE_BYTES:
            raise _TooLarge
        self.files.append(relative)

    def _repository_elsewhere(self, relative: Path) -> str | None:
        """The repository a ``.git`` file names (``gitdir: PATH``), when it is outside the workspace."""
        try:
            with open(self.source / relative, "rb") as handle:
                first = handle.read(4096).split(b"\n", 1)[0].decode("utf-8", "replace")
        except OSError:
            return None
        named = first.removeprefix("gitdir:").strip()
        if not first.startswith("gitdir:") or not named:
            return None
        where = Path(os.path.realpath((self.source / relative).parent / named))
        return None if where.is_relative_to(self.source) else str(where)

    def _plan_link(self, relative: Path) -> None:
        link = self.source / relative
        leads_to = Path(os.path.realpath(link))
        if leads_to.is_relative_to(self.source):
            # Relative to the link's real folder, through real folders only: the same
            # place in the copy.
            self.links.append((relative, os.path.relpath(leads_to, link.parent)))
        else:
            with contextlib.suppress(OSError):
                leads_to = Path(os.readlink(link))
            self.left_out.append(f"{relative} (a link to {leads_to}, outside the workspace)")

    def make(self, target: Path) -> None:
        """Copy what the plan holds into ``target``; raises _TooLarge if files grew past the limit."""
        for folder in self.folders:  # parents come before their children
            (target / folder).mkdir()
        room = MAX_WORKSPACE_BYTES
        for relative in self.files:
            try:
                room -= _copy_file(self.source / relative, target / relative, room)
            except _NotRegular:
                self.left_out.append(f"{relative} (no longer a regular file)")
            except OSError as exc:
                self.left_out.append(f"{relative} ({exc.strerror})")
        for relative, leads_to in self.links:
            os.symlink(leads_to, target / relative)
        for folder in reversed(self.folders):  # children first: a read-only folder is filled already
            with contextlib.suppress(OSError):
                shutil.copystat(self.source / folder, target / folder, follow_symlinks=False)

    def note(self) -> str | None:
        if not self.left_out:
            return None
        named = ", ".join(self.left_out[:_NAMED_SKIPS])
        more = len(self.left_out) - _NAMED_SKIPS
        return (f"left out of the copy of the workspace {self.source}: {named}"
                + (f" and {more} more" if more > 0 else ""))


class _NotRegular(OSError):
    pass


def _copy_file(source: Path, target: Path, room: int) -> int:
    """Copy one regular file (never through a link, never blocking on a FIFO put in its
    place); returns its size. Raises _TooLarge past ``room`` bytes."""
    descriptor = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(descriptor, "rb") as reader:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise _NotRegular
        copied = 0
        with open(target, "xb") as writer:
            while chunk := reader.read(1 << 20):
                copied += len(chunk)
                if copied > room:
                    raise _TooLarge
                writer.write(chunk)
    shutil.copystat(source, target, follow_symlinks=False)
    return copied


def copy_workspace(source: Path | None, which: str, into: Path, home: Home) -> tuple[Path, str | None]:
    """A fresh copy of the workspace ``source`` for a rerun (``which``: ``recorded`` or
    ``given``), and what the report should say about it (what was left out, or why
    nothing was copied)."""
    target = into / "workspace"
    target.mkdir(parents=True, exist_ok=True)
    if source is None:
        return target, None
    source = source.resolve()
    if not source.is_dir():
        return target, (f"the {which} workspace {source} does not exist (any more); nothing was copied: give the "
                        "folder to copy with --workspace DIR (pytest: the zagent_workspace ini option)")
    if source == Path("/"):
        return target, f"the {which} workspace is /; not copied"
    # zagent's own folders are not the workspace's content, even when they are in it.
    copy = _WorkspaceCopy(source, excluded={home.root, into.resolve()})
    try:
        copy.plan()
        copy.make(target)
    except _TooLarge:
        _remove(target)
        target.mkdir()
        return target, f"the {which} workspace {source} is over {MAX_WORKSPACE_BYTES} bytes; not copied"
    return target, copy.note()


def workspace_names(*paths: str | Path | None) -> list[str]:
    """Every spelling of the workspaces a path in an output may use (as given, and with its
    links resolved), longest first: a workspace inside another is replaced whole."""
    names = {str(path) for path in paths if path} | {os.path.realpath(path) for path in paths if path}
    return sorted(names, key=len, reverse=True)


# -- the replay's own folder ------------------------------------------------------------------


@contextlib.contextmanager
def replay_folder(home: Home) -> Iterator[Path]:
    """A new folder ``<home>/tmp/replay-PID-TICKS-XXXX`` for one replay, removed when done.

    A replay that was killed cannot remove its folder: the next one does, for every
    folder whose process (pid and start time in its name) is gone.
    """
    home.tmp_dir.mkdir(parents=True, exist_ok=True)
    for folder in home.tmp_dir.glob("replay-*"):
        if not _owner_alive(folder.name):
            _remove(folder)
    me = ProcessIdentity.of(os.getpid())
    path = Path(tempfile.mkdtemp(prefix=f"replay-{os.getpid()}-{me.start_ticks if me else 0}-", dir=home.tmp_dir))
    try:
        yield path
    finally:
        _remove(path)


def _owner_alive(name: str) -> bool:
    """Whether the replay that named its folder ``name`` still runs (unknown names: yes)."""
    try:
        _, pid, ticks, _ = name.split("-", 3)
        owner = ProcessIdentity(pid=int(pid), start_ticks=int(ticks), boot_id=boot_id())
    except ValueError:
        return True  # not a replay's folder: leave it
    if ProcessIdentity.of(os.getpid()) is None:  # no /proc: the pid is all there is
        try:
            os.kill(owner.pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True
    return owner.alive()


def _remove(path: Path) -> None:
    """Remove a folder a rerun's tools may have made read-only in places."""
    for folder, _, _ in os.walk(path):
        with contextlib.suppress(OSError):
            os.chmod(folder, 0o700)
    shutil.rmtree(path, ignore_errors=True)
