"""Turning a process spec into its confined form: a call's processes inside bubblewrap.

Every process of a call runs in a PID namespace of its own, under bubblewrap's
``--die-with-parent``: when the call's program ends (it exits, times out, is killed, or
whoever started it dies), the namespace's init goes with it and the kernel kills what is
left inside, however it tried to get away (``setsid``, closed output, a cleared
environment). The engine's processes are not in that namespace, so ``/proc/$PPID`` is not
zagent. That holds whatever ``sandbox.mode`` says.

A process that runs under a :class:`~zagent_core.config.SandboxGrant` is confined on top of
that: the file system read-only, the workspace (``workspace-write``) and the call's own
folders writable, the home hidden but for its tools and the call's folders (so the journal,
``config.json`` and other sessions' folders cannot be read), ``/tmp`` and ``$TMPDIR``
writable in ``workspace-write`` (read-only in ``read-only``; private and empty with ``private_tmp``), and no
network but a loopback of its own unless granted. Which processes run under which grant is
:func:`grant_for`'s answer, from ``config.json``'s ``sandbox`` and the tool's own ``sandbox``.

Where bubblewrap cannot run (not installed, no user namespaces), processes run as they
always did; :func:`unavailable` says why, and the engine says it once per session.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from zagent_core.config import SandboxConfig, SandboxGrant
from zagent_core.home import Home
from zagent_core.logs import get_logger
from zagent_core.problems import Problem
from zagent_core.tools.runner import ProcessSpec

log = get_logger(__name__)

PROGRAM = "bwrap"
#: Every feature a confined call uses, tried once: a host that refuses one (no user
#: namespaces, a container that forbids mounting /proc) has no sandbox at all.
_PROBE = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--unshare-pid",
          "--unshare-net", "--die-with-parent", "true"]
_PROBE_SECONDS = 10.0


class SandboxRefused(ValueError):
    """A tool asks the sandbox for more than ``config.json`` allows; the message says what."""


@dataclass(frozen=True)
class _Found:
    program: str | None
    why_not: str | None


@functools.cache
def _found() -> _Found:
    if not sys.platform.startswith("linux"):
        return _Found(None, "bubblewrap runs on Linux only")
    program = shutil.which(PROGRAM)
    if program is None:
        return _Found(None, "bubblewrap (bwrap) is not installed (Debian, Ubuntu: apt-get install bubblewrap)")
    try:
        probe = subprocess.run([program, *_PROBE], capture_output=True, timeout=_PROBE_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _Found(None, f"{program} could not be run: {exc}")
    if probe.returncode != 0:
        said = probe.stderr.decode("utf-8", "replace").strip().splitlines()
        why = said[-1] if said else f"exit code {probe.returncode}"
        return _Found(None, f"{program} cannot make a sandbox here ({why}; user namespaces may be turned off)")
    return _Found(program, None)


def unavailable() -> str | None:
    """Why no process can be confined on this host, or None when bubblewrap works (asked once a process)."""
    return _found().why_not


def problems() -> list[Problem]:
    """What a session says once, in its warnings, when it runs without a sandbox."""
    why = unavailable()
    if why is None:
        return []
    return [Problem(source="sandbox", severity="warning", message=(
        f"not active: {why}. Shell commands and tools run unconfined, with the user's rights, and what a call "
        "leaves running outside its process group is found by its environment only"))]


def _configured(config: SandboxConfig) -> SandboxGrant | None:
    if config.mode == "off":
        return None
    return SandboxGrant(mode=config.mode, network=config.network, writable=config.writable,
                        readable=config.readable)


def _inside(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _resolved(paths: Iterable[str], workspace: Path) -> list[Path]:
    """``paths`` as config.json and manifests give them (absolute, ``~/...``, or relative to the
    workspace), absolute with their links resolved: bubblewrap mounts what they are."""
    return [(workspace / Path(path).expanduser()).resolve() for path in paths]


def _beyond(asked: SandboxGrant, allowed: SandboxGrant, workspace: Path) -> list[str]:
    """What ``asked`` wants that ``allowed`` does not give, worded for the user."""
    beyond = []
    if asked.mode == "workspace-write" and allowed.mode == "read-only":
        beyond.append("writing to the workspace (sandbox.mode is read-only)")
    if asked.network and not allowed.network:
        beyond.append("the network")
    can_write = _resolved(allowed.writable, workspace) + ([workspace] if allowed.mode == "workspace-write" else [])
    beyond += [f"writing to {path}" for path in _resolved(asked.writable, workspace) if not _inside(path, can_write)]
    can_read = _resolved(allowed.readable, workspace)
    beyond += [f"reading {path}" for path in _resolved(asked.readable, workspace) if not _inside(path, can_read)]
    return beyond


def grant_for(config: SandboxConfig, asked: SandboxGrant | None, *, composed: bool, workspace: Path,
              who: str) -> SandboxGrant | None:
    """The grant a process runs under (None: not confined, its PID namespace only).

    What a model composes (``composed``) runs under config.json's ``sandbox``. A tool or a
    server runs under its own ``sandbox`` when it asks for one; with ``sandbox.tools: "all"``
    under config.json's, and a tool asking for more than that (the network, paths) is
    refused with :class:`SandboxRefused`, naming ``who`` asks what.
    """
    configured = _configured(config)
    if composed:
        return configured
    if config.tools == "model" or configured is None:
        return asked
    if asked is None:
        return configured
    beyond = _beyond(asked, configured, workspace)
    if beyond:
        raise SandboxRefused(
            f'{who} asks its sandbox for {", ".join(beyond)}, which config.json does not grant (sandbox.tools is '
            '"all"): add it to config.json\'s "sandbox" (network, writable, readable) or take it out of its "sandbox"')
    return asked


def _journal_files(home: Home) -> list[Path]:
    """The SQLite journal's files, where the home's journal is one (not PostgreSQL's)."""
    location = home.journal_location()
    if "://" in location and not location.startswith("sqlite:///"):
        return []
    # sqlite:///relative/path or sqlite:////absolute/path, as zagent_store reads them.
    journal = Path(location.removeprefix("sqlite:///")).expanduser().resolve()
    return [journal.with_name(journal.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")]


@dataclass(frozen=True)
class Confinement:
    """What one call's (or one MCP server's) processes may reach: paths absolute and resolved."""

    #: None: the PID namespace alone, the file system and the network as they are.
    grant: SandboxGrant | None
    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    #: Folders hidden (an empty read-only folder in their place) and files hidden (unreadable).
    hidden: tuple[Path, ...] = ()
    #: /tmp and $TMPDIR: a private, empty tmpfs each; else writable, unless ``read_only_tmp``.
    private_tmp: bool = False
    read_only_tmp: bool = False

    @classmethod
    def of(cls, grant: SandboxGrant | None, *, config: SandboxConfig, workspace: Path, home: Home,
           own: Sequence[Path]) -> Confinement:
        """The confinement of a process running under ``grant`` for ``home``'s sessions, whose
        own folders (``own``: the call's folder, the session's scratch) stay writable."""
        if grant is None:
            return cls(grant=None)
        writable = [*([workspace] if grant.mode == "workspace-write" else []), *_resolved(grant.writable, workspace),
                    *(folder.resolve() for folder in own)]
        # The home (its journal, config.json, other sessions' folders), and a journal config.json or
        # $ZAGENT_JOURNAL puts elsewhere, with its WAL: a tool reads no session but through what it is given.
        hidden = [home.root, *(path for path in _journal_files(home) if not _inside(path, [home.root]))]
        readable = [home.tools_dir, home.skills_dir, *([workspace] if grant.mode == "read-only" else []),
                    *_resolved(grant.readable, workspace), *(path for path in _zagent_itself() if not _inside(path, writable))]
        return cls(grant=grant, writable=tuple(writable), readable=tuple(readable), hidden=tuple(hidden),
                   private_tmp=config.private_tmp, read_only_tmp=grant.mode == "read-only")

    def _mounts(self) -> list[tuple[Path, list[str]]]:
        """The mounts over the read-only root, each with the path it mounts on."""
        mounts: list[tuple[Path, list[str]]] = []
        temporary = {Path("/tmp"), *([Path(os.environ["TMPDIR"]).resolve()] if os.environ.get("TMPDIR") else [])}
        for folder in sorted(temporary):
            if self.private_tmp:
                mounts.append((folder, ["--tmpfs", str(folder)]))
            elif not self.read_only_tmp:
                mounts.append((folder, ["--bind-try", str(folder), str(folder)]))
        for path in self.hidden:
            if path.is_dir():
                mounts.append((path, ["--tmpfs", str(path)]))
            elif path.exists():
                mounts.append((path, ["--ro-bind", "/dev/null", str(path)]))
        mounts += [(path, ["--ro-bind-try", str(path), str(path)]) for path in self.readable]
        mounts += [(path, ["--bind-try", str(path), str(path)]) for path in self.writable]
        # A mount covers what an earlier one put below it: shallow first (in that order at one depth).
        return sorted(mounts, key=lambda mount: len(mount[0].parts))

    def arguments(self, cwd: Path) -> list[str]:
        """bubblewrap's arguments (without the program and the command) for a process run in ``cwd``."""
        arguments = ["--die-with-parent", "--unshare-pid"]
        if self.grant is None:
            return [*arguments, "--bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc", "--chdir", str(cwd)]
        arguments += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        if not self.grant.network:
            arguments.append("--unshare-net")
        for _, mount in self._mounts():
            arguments += mount
        # The folders hidden under an empty tmpfs stay empty: nothing written there would last.
        arguments += [argument for path in self.hidden if path.is_dir() for argument in ("--remount-ro", str(path))]
        return [*arguments, "--chdir", str(cwd)]

    def wrapper(self, cwd: Path) -> tuple[str, ...]:
        """What runs a command in this confinement (bubblewrap and its arguments, up to ``--``),
        or nothing where there is no sandbox."""
        program = _found().program
        return () if program is None else (program, *self.arguments(cwd), "--")


def _zagent_itself() -> list[Path]:
    """What ``zagent call`` runs on in the sandbox: the interpreter's environment and zagent's own
    code, which a private /tmp hides when they live there (a virtualenv or a checkout under /tmp)."""
    return [Path(sys.prefix).resolve(), Path(__file__).resolve().parents[2]]


def confine(spec: ProcessSpec, confinement: Confinement) -> ProcessSpec:
    """``spec`` run in ``confinement`` (as it is, where there is no sandbox)."""
    return dataclasses.replace(spec, wrapper=confinement.wrapper(spec.cwd))
