"""Resource identifiers: 32 lowercase hex digits (a random UUID4 without dashes)."""

from __future__ import annotations

import re

__all__ = ["looks_like_id"]

_ID = re.compile(r"^[0-9a-f]{32}$")


def looks_like_id(value: str) -> bool:
    """True when ``value`` could be an id. Use it to answer 404 without querying for junk."""
    return _ID.match(value) is not None
