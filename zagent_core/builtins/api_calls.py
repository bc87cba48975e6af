"""Asking an HTTP API for a built-in (``web_search``'s providers, ``generate_image``'s Images
API): the answer is streamed and refused past a cap, so a server that answers without end
costs no more than the cap; an error status is refused with the start of what it said."""

from __future__ import annotations

import httpx

#: What an error answer is quoted of, in bytes.
_QUOTED = 500


class Refused(ValueError):  # noqa: N818 - the API's answer, not a failure of zagent's
    """An answer that is not one: an error status, or one over its cap; the message says which."""


def asked(client: httpx.Client, request: httpx.Request, cap: int, what: str) -> bytes:
    """The body of the answer to ``request``; :class:`Refused` for an error status or past ``cap``
    bytes (``what`` says what a normal answer is, for the message)."""
    response = client.send(request, stream=True)
    try:
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > cap:
                raise Refused(f"its answer is over {cap // 2**20} MiB, more than {what}")
            if response.is_error and len(body) >= _QUOTED:
                break
        if response.is_error:
            raise Refused(f"it answered HTTP {response.status_code}: {body[:_QUOTED].decode('utf-8', 'replace')}")
        return bytes(body)
    finally:
        response.close()
