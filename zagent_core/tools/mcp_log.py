"""What the MCP SDK logs about a stdio server, in one line that names the server.

The SDK's stdio client logs a line a server writes on its stdout that is not a JSON-RPC
message (and a read of its stdout that fails) with ``logger.exception``: a whole
traceback of zagent's and the SDK's frames on stderr, for a server's mistake, in every
command that starts the server. :func:`one_line` turns each such record into one warning
line, what the SDK said, which server, and what was wrong with the line (with ``-v``,
when the logs are at ``info``, the traceback is kept). The server is the one whose
connection :data:`serving` names: each connection's task sets it, and the SDK's reading
task, started inside that connection, inherits it.
"""

from __future__ import annotations

import contextvars
import functools
import logging

#: The stdio server whose connection the current task serves (set by its connection's task).
serving: contextvars.ContextVar[str] = contextvars.ContextVar("zagent_mcp_server", default="?")
#: What is shown of a line or an error, at most.
_SHOWN = 200


@functools.cache
def one_line() -> None:
    """Make the SDK's stdio client log a server's mistakes in one line (once per process)."""
    logging.getLogger("mcp.client.stdio").addFilter(_one_line)


def _one_line(record: logging.LogRecord) -> bool:
    exc = record.exc_info[1] if record.exc_info else None
    if exc is None or logging.getLogger(record.name).isEnabledFor(logging.INFO):
        return True
    said = record.getMessage()
    record.msg, record.args = '%s (MCP server "%s"): %s', (said, serving.get(), _what(exc))
    record.exc_info, record.exc_text = None, None
    record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
    return True


def _what(exc: BaseException) -> str:
    """The error in one line: for pydantic's, its first problem and the text it was about."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = (errors() or [{}])[0]
        return f"{first.get('msg', exc.__class__.__name__)}: {str(first.get('input', ''))[:_SHOWN]!r}"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[-1] if lines else exc.__class__.__name__)[:_SHOWN]
