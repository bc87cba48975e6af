"""Where a provider's requests go: its base URL, split into what is sent where and what is shown.

A base URL may carry credentials: ``https://user:pass@host/v1?api-version=2024-06-01&key=...``.
Given to urllib whole, ``user:pass@host`` would be taken for the host name and the query
would land before the request's path (``/v1?key=.../chat/completions``). So the userinfo
goes as HTTP basic auth and the query after the path, where Azure OpenAI reads its
``?api-version=``. Neither is ever journaled or shown: :attr:`Endpoint.shown` (and
:func:`shown_url`) has the userinfo and every query value replaced by ``***``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

#: What stands for a credential in a URL that is journaled or shown (``[redacted]``, the key's
#: mark, would not do: ``[`` in a URL's host part makes it an IPv6 address to every parser).
MARK = "***"


@dataclass(frozen=True)
class Endpoint:
    """A base URL taken apart: where requests go, what goes with them, and what is shown."""

    #: ``scheme://host[:port]/path``: no userinfo, no query, no trailing ``/``.
    base: str
    #: The query, sent after each request's path (empty: none).
    query: str
    #: ``Basic ...`` from the userinfo, or None.
    authorization: str | None
    #: :attr:`base` and :attr:`query` as they may be journaled and shown: the userinfo and
    #: every query value masked.
    shown_base: str
    shown_query: str
    #: What a server could echo back of the credentials (the password, the query's values), to redact.
    secrets: tuple[str, ...]

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """Raises ValueError, saying so, for a URL that does not parse (a broken IPv6 host)."""
        try:
            parts = urlsplit(url.rstrip("/"))
            parts.port  # a port that is not a number raises here, not at the first request
        except ValueError as exc:
            raise ValueError(f"the model's base URL does not parse ({exc}): check model.base_url or "
                             "the provider's *_BASE_URL variable") from None
        userinfo, at, host = parts.netloc.rpartition("@")
        path = parts.path.rstrip("/")
        base = f"{parts.scheme}://{host}{path}"
        authorization = None
        secrets = [value for _, value in _pairs(parts.query) if value]
        if at:
            user, _, password = userinfo.partition(":")
            credentials = f"{unquote(user)}:{unquote(password)}".encode()
            authorization = "Basic " + base64.b64encode(credentials).decode("ascii")
            secrets += [unquote(password), password] if password else [unquote(user)]
        shown_query = "&".join(f"{name}={MARK}" if name else MARK for name, _ in _pairs(parts.query))
        return cls(base=base, query=parts.query, authorization=authorization,
                   shown_base=f"{parts.scheme}://{MARK + '@' if at else ''}{host}{path}", shown_query=shown_query,
                   secrets=tuple(sorted(set(secrets), key=len, reverse=True)))

    @property
    def shown(self) -> str:
        """The base URL as it may be journaled and shown."""
        return self.shown_at("")

    def at(self, path: str) -> str:
        """The URL a request to ``path`` is sent to: the base, the path, then the query."""
        return _joined(self.base, path, self.query)

    def shown_at(self, path: str) -> str:
        """:meth:`at` as it may be shown."""
        return _joined(self.shown_base, path, self.shown_query)


def shown_url(url: str) -> str:
    """``url`` as it may be journaled and shown: its userinfo and query values masked (a URL
    that does not parse, whole)."""
    try:
        return Endpoint.parse(url).shown
    except ValueError:
        return MARK


def carries_credentials(url: str) -> bool:
    """Whether ``url`` has a userinfo or a query (masked or not)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return "@" in parts.netloc or bool(parts.query)


def _joined(base: str, path: str, query: str) -> str:
    return f"{base}{path}{'?' + query if query else ''}"


def _pairs(query: str) -> list[tuple[str, str]]:
    """The query's ``name=value`` parts as written (a part with no ``=`` is all value: no name)."""
    pairs = []
    for part in query.split("&") if query else []:
        name, equals, value = part.partition("=")
        pairs.append((name, value) if equals else ("", name))
    return pairs
