"""Identifiers: sortable by time, readable, unique without coordination."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone


def new_session_id() -> str:
    """``20261130-044600-3fa2c1``: sorts by start time, readable in a listing."""
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def new_call_id() -> str:
    return f"call_{secrets.token_hex(6)}"


def new_wake_id() -> str:
    return f"wake_{secrets.token_hex(6)}"
