"""What a form's POST found, said once on the page it redirects to (POST/redirect/GET).

Every form of the console (an answer, an approval, a denial, a fork) answers its POST with a
303 to a session's page, so reloading that page, or going back to it, never posts again. What
the POST found (the decision given, or why it was refused) rides to that page in a cookie that
lives :data:`COOKIE_SECONDS`, signed with the console's key (another service of this host can
set cookies for it too, never sign them), and that the page's next GET reads and clears.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass

#: How long a message waits for the page it was said to (the redirect follows at once).
COOKIE_SECONDS = 60
#: A message's text, at most (a cookie holds about 4 KB; a refusal is a sentence or two).
MOST_CHARS = 1500


@dataclass(frozen=True)
class Said:
    """A message for a session's page: an outcome, or a ``problem`` (then the page answers 409)."""

    session_id: str
    text: str
    problem: bool = False


def _signature(payload: str, key: str) -> str:
    return hmac.new(key.encode(), b"zagent ui said " + payload.encode(), hashlib.sha256).hexdigest()


def said_cookie(said: Said, key: str) -> str:
    """The cookie's value: the message, and its signature by ``key``."""
    text = said.text if len(said.text) <= MOST_CHARS else said.text[: MOST_CHARS - 1] + "…"
    payload = base64.urlsafe_b64encode(json.dumps([said.session_id, text, said.problem]).encode()).decode()
    return f"{payload}.{_signature(payload, key)}"


def read_said(value: str | None, key: str, session_id: str) -> Said | None:
    """The message of the cookie ``value`` for ``session_id``'s page; None when there is none,
    it is for another page, or ``key`` did not sign it."""
    payload, _, signature = (value or "").partition(".")
    if not payload or not hmac.compare_digest(signature.encode(), _signature(payload, key).encode()):
        return None
    try:
        sid, text, problem = json.loads(base64.urlsafe_b64decode(payload.encode()))
    except (binascii.Error, ValueError, TypeError):
        return None
    return Said(sid, str(text), bool(problem)) if sid == session_id else None
