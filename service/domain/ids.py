"""Resource identifiers (32 lowercase hex digits, a random UUID4 without dashes) and the checks
shared by requests that name several of them or carry an ``Idempotency-Key``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from service.domain.errors import InvalidInputError

__all__ = [
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "check_idempotency_key",
    "looks_like_id",
    "refuse_duplicates",
]

_ID = re.compile(r"^[0-9a-f]{32}$")
#: Longest ``Idempotency-Key`` a request may carry.
MAX_IDEMPOTENCY_KEY_LENGTH: Final[int] = 200


def looks_like_id(value: str) -> bool:
    """True when ``value`` could be an id. Use it to answer 404 without querying for junk."""
    return _ID.match(value) is not None


def refuse_duplicates(ids: Sequence[str], *, field: str, what: str) -> None:
    """422 when a request names the same ``what`` (e.g. "model") twice in ``field``."""
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise InvalidInputError(
            f"a {what} is named more than once: " + ", ".join(map(repr, dupes)),
            errors=[{"loc": ["body", field], "msg": f"duplicate {what} ids"}],
        )


def check_idempotency_key(key: str | None) -> None:
    """422 for an ``Idempotency-Key`` that is empty or too long (None: no key, fine)."""
    if key is not None and not (0 < len(key) <= MAX_IDEMPOTENCY_KEY_LENGTH):
        raise InvalidInputError(
            f"Idempotency-Key must have 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters",
            errors=[{"loc": ["header", "Idempotency-Key"], "msg": "bad length"}],
        )
