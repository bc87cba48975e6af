"""Nested calls from a tool's process: the call socket its process reaches its session by (``zagent call``).

While a call's process runs in the foreground, the session listens on a Unix socket made for
that call alone: in a runtime folder of its own (:func:`socket_folder`, mode 0700, the socket
0600), named in the process's environment (``ZAGENT_CALL_SOCKET``) with a token made for the
call (``ZAGENT_CALL_TOKEN``), so only that call's process tree, which inherits both, can use it.
The socket goes away with the call: a process it left behind cannot call on its behalf; a
crash leaves it, and the resume that settles the call removes it (:func:`remove_left`).

One request a connection, one JSON line each way: :class:`NestedRequest` in,
:class:`NestedReply` out. The session runs the nested call as any call (validated,
journaled with ``parent_call_id``, capped and confined); a call's nested calls run one at a
time, in the order they connect.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import selectors
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from zagent_core.tools.results import ToolResult

#: The variables that tell a call's process where its session listens, and the call's token.
SOCKET_VARIABLE = "ZAGENT_CALL_SOCKET"
TOKEN_VARIABLE = "ZAGENT_CALL_TOKEN"
#: The largest request read (the tool's name and its arguments, as JSON): 1 MiB. Longer
#: requests are refused unread; arguments that large belong in a file the tool reads.
REQUEST_BYTES = 1024 * 1024
#: Connections waiting while a nested call runs: more are refused by the kernel.
_BACKLOG = 8
#: How long a connected client may take to send its request, in seconds.
_REQUEST_SECONDS = 30.0


class NestedRequest(BaseModel):
    """What ``zagent call`` sends: the call's token, the tool and its arguments."""

    model_config = ConfigDict(extra="forbid")

    token: str
    tool: str
    arguments: Any = None


class NestedReply(BaseModel):
    """What the session answers: the nested call's result as its caller receives it."""

    model_config = ConfigDict(extra="forbid")

    output: str
    is_error: bool


#: Runs one nested call of a tool by name: its result.
Answer = Callable[[str, Any], ToolResult]


def _runtime_root() -> Path:
    """Where runtime folders go: ``$XDG_RUNTIME_DIR`` (the user's own), else the temporary
    folder, else ``/tmp``: the first short enough, as a socket's path must stay under about
    100 bytes (a home's may not, nor a ``$TMPDIR`` deep in a test's or a build's folder)."""
    for candidate in (os.environ.get("XDG_RUNTIME_DIR"), tempfile.gettempdir()):
        if candidate and len(candidate) < 60 and os.path.isdir(candidate):
            return Path(candidate)
    return Path("/tmp")


def _private_root() -> Path:
    """``zagent-UID`` in the runtime root, made 0700; used only while it is this user's alone."""
    root = _runtime_root() / f"zagent-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o700)
    found = os.lstat(root)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise PermissionError(f"{root} is not a folder of this user's alone (mode 0700): remove it")
    return root


def socket_folder(session_id: str, call_id: str) -> Path:
    """The runtime folder of the socket of call ``call_id`` of session ``session_id``: named by
    both (hashed: a socket's path must stay under about 100 bytes), so a resume finds it."""
    return _private_root() / hashlib.sha256(f"{session_id}/{call_id}".encode()).hexdigest()[:16]


def remove_left(session_id: str, call_id: str) -> None:
    """Remove the socket folder a crash left behind for a call (nothing if there is none)."""
    with contextlib.suppress(OSError):
        shutil.rmtree(socket_folder(session_id, call_id))


class CallSocket:
    """The socket one call's process reaches its session by, while the call runs."""

    def __init__(self, answer: Answer, folder: Path) -> None:
        self._answer = answer
        self.token = secrets.token_hex(16)
        #: The runtime folder (0700) that holds the socket and nothing else (one a crash left is made anew).
        self.folder = folder
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(mode=0o700)
        self.path = self.folder / "call.sock"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(str(self.path))
            os.chmod(self.path, stat.S_IRUSR | stat.S_IWUSR)
            self._listener.listen(_BACKLOG)
        except OSError:
            self._listener.close()
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="zagent-call-socket", daemon=True)
        self._thread.start()

    def variables(self) -> dict[str, str]:
        """What the call's process is told of its socket."""
        return {SOCKET_VARIABLE: str(self.path), TOKEN_VARIABLE: self.token}

    def __enter__(self) -> CallSocket:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening (a nested call running now finishes first) and remove the folder."""
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join()
        for end in (self._wake_r, self._wake_w, self._listener):
            end.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select()}
                if self._wake_r in ready:
                    return
                with contextlib.suppress(OSError):
                    connection, _ = self._listener.accept()
                    with connection:
                        self._handle(connection)

    def _handle(self, connection: socket.socket) -> None:
        connection.settimeout(_REQUEST_SECONDS)
        reply = self._reply(_read_line(connection))
        connection.settimeout(None)
        connection.sendall(reply.model_dump_json().encode() + b"\n")

    def _reply(self, line: bytes | None) -> NestedReply:
        if line is None:
            return NestedReply(output=f"zagent call: the request is over {REQUEST_BYTES:,} bytes or was cut off; "
                                      "pass large arguments in a file", is_error=True)
        try:
            request = NestedRequest.model_validate_json(line)
        except ValidationError:
            return NestedReply(output="zagent call: the request is not a call (the tool's name, its arguments and "
                                      "the token)", is_error=True)
        if not hmac.compare_digest(request.token, self.token):
            return NestedReply(output=f"zagent call: the token is not this call's ({TOKEN_VARIABLE}); only the "
                                      "process tree of the call the socket was made for may use it", is_error=True)
        try:
            result = self._answer(request.tool, request.arguments)
        except BaseException as exc:  # noqa: BLE001 - the call was stopped (Ctrl-C) or failed: say so to the caller
            return NestedReply(output=f"zagent call: the nested call of {request.tool} did not finish: "
                                      f"{type(exc).__name__}", is_error=True)
        return NestedReply(output=result.output, is_error=result.is_error)


def _read_line(connection: socket.socket) -> bytes | None:
    """One request line, at most :data:`REQUEST_BYTES` (None: longer, or cut off)."""
    data = bytearray()
    while len(data) <= REQUEST_BYTES:
        try:
            chunk = connection.recv(65536)
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
        end = data.find(b"\n")
        if end >= 0:
            return bytes(data[:end])
    return None


class NotInACall(Exception):  # noqa: N818 - a user's mistake, said as such
    """``zagent call`` was run outside a call's process: there is no session to call."""


def call(name: str, arguments: Any, environ: Mapping[str, str] | None = None) -> NestedReply:
    """Call tool ``name`` in the session of the call whose process this is (its environment
    says where), and wait for its result. Raises :class:`NotInACall` outside a call's process,
    :class:`OSError` when the session cannot be reached."""
    environ = os.environ if environ is None else environ
    path, token = environ.get(SOCKET_VARIABLE), environ.get(TOKEN_VARIABLE)
    if not path or not token:
        raise NotInACall(f"zagent call calls a tool for the tool that runs it, and {SOCKET_VARIABLE} is not set: "
                         "run it from a tool's program while zagent runs its call (zagent tools run NAME runs a "
                         "tool yourself)")
    request = NestedRequest(token=token, tool=name, arguments=arguments).model_dump_json().encode() + b"\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(path)
        connection.sendall(request)
        connection.shutdown(socket.SHUT_WR)
        with connection.makefile("rb") as answer:
            line = answer.readline()
    if not line:
        raise ConnectionError(f"the session at {path} closed the connection without an answer")
    return NestedReply.model_validate_json(line)
