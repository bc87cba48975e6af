"""Paths opened beneath a root, one component at a time: what a file built-in touches is what it checked.

With ``builtins.confine_to_workspace`` a file built-in touches nothing outside the
workspace. Checking a path (its links followed) and then opening it by its name is a race:
in between, a process of the workspace can swap a folder for a symbolic link to anywhere,
and the open follows it out (a hostile run made ``write_file`` write outside, 3 times out
of 3). So no path is opened by its name. From the root (the workspace; ``/`` when not
confined) each component is opened relative to the folder before it, with ``O_NOFOLLOW``
(``openat``); a symbolic link met on the way is read (``readlinkat``) and followed by hand,
and refused if it leads out of the root; ``..`` goes back to the folder it came from,
checked to be that very folder, and never above the root. What is opened is what was
checked: a swap after a step cannot redirect it, and a swap during one makes it fail
(``ELOOP``), never follow.

One folder is held open at a time (the ones above it are known by their device and inode),
so a path of any depth, and a tree walked to any depth (``search.walk``), takes two
descriptors at most.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from zagent_core.tools.inprocess import BuiltinContext

#: Symbolic links followed in one path at most, as the kernel does (then ``ELOOP``).
MAX_LINKS = 40
#: An entry as it is: a folder, a file, or the link itself (not followed).
_ENTRY = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
#: A folder to list.
LISTED = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Identity = tuple[int, int]


class Outside(Exception):  # noqa: N818 - not an error of zagent's: the path leads out of the root
    """The path, or a link on its way, leads out of the root."""


class FolderMoved(OSError):
    """A folder was moved while it was walked: going back up from it did not lead where it came from."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.ESTALE, "a folder was moved while it was read", path)


def identity(fd: int) -> Identity:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def parent(fd: int, expected: Identity, path: str, flags: int = LISTED) -> int:
    """The folder above folder ``fd``, opened with ``flags``, if it is the folder ``expected`` (where
    the walk came down from); else :class:`FolderMoved` (``path``: the folder ``fd`` was, for the message)."""
    above = os.open("..", flags, dir_fd=fd)
    if identity(above) != expected:
        os.close(above)
        raise FolderMoved(path)
    return above


@dataclass
class Place:
    """What a path came to: the folder holding it, open (``O_PATH``), and its name there (``.``: the
    folder itself). Close it (it is a context manager) when done."""

    #: The path as the model addressed it: the read-state key.
    key: Path
    folder: int
    name: str

    def __enter__(self) -> Place:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        os.close(self.folder)

    def lstat(self) -> os.stat_result:
        """The entry's own status (a link swapped in since is not followed); ``FileNotFoundError`` if none."""
        return os.stat(self.name, dir_fd=self.folder, follow_symlinks=False)

    def exists(self) -> bool:
        try:
            self.lstat()
        except FileNotFoundError:
            return False
        return True

    def names(self) -> list[str]:
        """The names in the folder that holds the entry."""
        listed = os.open(".", LISTED, dir_fd=self.folder)
        try:
            return os.listdir(listed)
        finally:
            os.close(listed)

    def open_folder(self) -> int:
        """The entry, a folder, open to be listed and walked; ``NotADirectoryError`` when it is none."""
        return os.open(self.name, LISTED, dir_fd=self.folder)


def _split(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _under(path: str, root: str) -> list[str]:
    """The components of absolute ``path`` below ``root``; :class:`Outside` when it is not below it."""
    if root == "/":
        return _split(path)
    if path == root:
        return []
    if not path.startswith(root.rstrip("/") + "/"):
        raise Outside
    return _split(path[len(root.rstrip("/")) + 1:])


class _Cursor:
    """A folder reached from the root, held open, and the identities of the folders above it."""

    def __init__(self, root: str) -> None:
        self.root = root
        # The root is the user's own (the workspace, or /): it is opened by its name.
        self.fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.root_identity = identity(self.fd)
        self.above: list[Identity] = []
        self.names: list[str] = []

    def path(self, name: str = "") -> str:
        return os.path.join(self.root, *self.names, name) if name else os.path.join(self.root, *self.names)

    def down(self, fd: int, name: str) -> None:
        self.above.append(identity(self.fd))
        os.close(self.fd)
        self.fd = fd
        self.names.append(name)

    def up(self) -> bool:
        """Back to the folder above; False at the root (which stays where it is)."""
        if not self.above:
            return False
        above = parent(self.fd, self.above[-1], self.path(), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        os.close(self.fd)
        self.fd = above
        self.above.pop()
        self.names.pop()
        return True

    def back_to_root(self) -> None:
        again = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        if identity(again) != self.root_identity:
            os.close(again)
            raise FolderMoved(self.root)
        os.close(self.fd)
        self.fd, self.above, self.names = again, [], []


def locate(root: str, confined: bool, path: str, *, make_folders: bool = False) -> tuple[int, str]:
    """Absolute ``path`` followed beneath ``root``, its links (the last one too) followed by hand:
    the folder holding what it names (an ``O_PATH`` descriptor, the caller's to close) and its
    name there (``.``: that folder itself). What it names need not exist; the folders on the way
    must (``make_folders`` makes the missing ones).

    Raises :class:`Outside` (only when ``confined``), ``FileNotFoundError`` for a missing folder
    (its path as ``filename``), ``NotADirectoryError``, :class:`FolderMoved`, or ``OSError``
    (``ELOOP`` past :data:`MAX_LINKS` links, ``ENAMETOOLONG``...)."""
    todo = deque(_under(path, root) if confined else _split(path))
    cursor = _Cursor(root if confined else "/")
    links = 0
    try:
        while todo:
            name = todo.popleft()
            if name == "..":
                if not cursor.up() and confined:
                    raise Outside
                continue
            fd = _entry(cursor, name, last=not todo, make_folder=make_folders)
            if fd is None:  # the last component, not there (yet)
                return cursor.fd, name
            mode, target = _what(fd)
            if target is not None:
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                if target.startswith("/"):
                    cursor.back_to_root()
                    todo.extendleft(reversed(_under(target, cursor.root)))
                else:
                    todo.extendleft(reversed(_split(target)))
            elif not todo:
                os.close(fd)
                return cursor.fd, name
            elif not stat.S_ISDIR(mode):
                os.close(fd)
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), cursor.path(name))
            else:
                cursor.down(fd, name)
        return cursor.fd, "."
    except BaseException:
        os.close(cursor.fd)
        raise


def _what(fd: int) -> tuple[int, str | None]:
    """The mode of the entry open at ``fd`` and, for a link, where it leads (the link is then closed)."""
    try:
        mode = os.fstat(fd).st_mode
        # The link opened is read, not whatever bears its name by now.
        target = os.readlink("", dir_fd=fd) if stat.S_ISLNK(mode) else None
    except BaseException:
        os.close(fd)
        raise
    if target is not None:
        os.close(fd)
    return mode, target


def _entry(cursor: _Cursor, name: str, *, last: bool, make_folder: bool) -> int | None:
    """Component ``name`` of the cursor's folder, as it is (``O_PATH``, a link not followed); None when the
    ``last`` component is not there; a folder on the way that is not there is made if ``make_folder``."""
    try:
        return os.open(name, _ENTRY, dir_fd=cursor.fd)
    except FileNotFoundError:
        if last:
            return None
        if not make_folder:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), cursor.path(name)) from None
    try:
        os.mkdir(name, dir_fd=cursor.fd)
    except FileExistsError:
        pass  # made meanwhile: opened as it is, like any other
    return os.open(name, _ENTRY, dir_fd=cursor.fd)


def place(context: BuiltinContext, shown: str, *, make_folders: bool = False) -> Place:
    """What the model's path ``shown`` names, beneath the workspace when confined, else from ``/``
    (see :func:`locate`); its refusal is :class:`~zagent_core.tools.inprocess.PathRefused`."""
    key = context.resolve(shown)
    confined = context.config.builtins.confine_to_workspace
    try:
        folder, name = locate(str(context.workspace), confined, str(key), make_folders=make_folders)
    except Outside:
        raise context.outside(shown) from None
    return Place(key, folder, name)
