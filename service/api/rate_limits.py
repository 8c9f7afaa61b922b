"""Rate limits on failed authentication and on expensive operations (the ``limits`` library).

Two rules, each configurable (``PRIVFIT_RATE_LIMIT_*``, in the ``limits`` notation such as
``"30/minute"``; empty turns a rule off):

* **failed authentication** — only failures are counted and only failures are refused, per
  client address and per presented key prefix: once an address or a prefix is over its limit,
  further *failures* from it get 429 instead of 401, but a request with a valid key is never
  refused by this rule (its own per-key limits apply). So one broken script behind a shared
  address (a hospital's proxy, Compose's network) cannot lock everyone else there out, and
  nobody can lock a site out by guessing with its public prefix. A failure from an address
  over its limit is not written to the audit log (the attacker's guesses cost it no rows);
* **expensive operations** (uploads, fits, aggregations, federated fits, predictions, model
  uploads) — counted per key and per client address.

A refused request gets ``429`` ``application/problem+json`` of type ``rate-limited`` with a
``Retry-After`` header (whole seconds). Counters live in ``PRIVFIT_RATE_LIMIT_STORAGE``:
``memory://`` (one process; the default) or e.g. ``redis://127.0.0.1:6379`` to share them across
API replicas.
"""

from __future__ import annotations

import math
import time
from typing import NoReturn

import limits
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

from service.domain.errors import RateLimitedError

__all__ = ["RateLimits", "parse_rate"]

_FAILED_AUTH = "failed-auth"
_EXPENSIVE = "expensive"
_WHOSE = {"address": "from this client address", "prefix": "with this key prefix"}


def parse_rate(text: str | None) -> limits.RateLimitItem | None:
    """``"30/minute"`` → a rate item; ``None`` or blank → no limit. ValueError when malformed."""
    if text is None or not text.strip():
        return None
    return limits.parse(text)


class RateLimits:
    """The service's two rate-limit rules over one counter storage."""

    def __init__(
        self, *, failed_auth: str | None, expensive: str | None, storage_url: str = "memory://"
    ) -> None:
        self._limiter = MovingWindowRateLimiter(storage_from_string(storage_url))
        self._failed_auth = parse_rate(failed_auth)
        self._expensive = parse_rate(expensive)

    def _retry_after(self, item: limits.RateLimitItem, *identifiers: str) -> int:
        stats = self._limiter.get_window_stats(item, *identifiers)
        return max(1, math.ceil(stats.reset_time - time.time()))

    def address_over_limit(self, address: str) -> bool:
        """True while this address is over its failed-authentication limit (counts nothing)."""
        item = self._failed_auth
        return item is not None and not self._limiter.test(item, _FAILED_AUTH, "address", address)

    def record_failed_authentication(self, address: str, key_prefix: str | None) -> None:
        """Count one failed authentication against the address and the presented prefix, then
        raise :class:`RateLimitedError` (429 instead of 401) if either is over its limit.

        A failure past the limit is not counted (the moving window holds at most ``limit``
        hits), so the refusal ends one window after the last counted failure."""
        item = self._failed_auth
        if item is None:
            return
        address_ok = self._limiter.hit(item, _FAILED_AUTH, "address", address)
        prefix_ok = not key_prefix or self._limiter.hit(item, _FAILED_AUTH, "prefix", key_prefix)
        if not address_ok:
            self._refuse_failed(item, ("address", address))
        if not prefix_ok:
            assert key_prefix is not None
            self._refuse_failed(item, ("prefix", key_prefix))

    def _refuse_failed(self, item: limits.RateLimitItem, identity: tuple[str, str]) -> NoReturn:
        raise RateLimitedError(
            f"too many failed authentications {_WHOSE[identity[0]]}; try again later",
            retry_after=self._retry_after(item, _FAILED_AUTH, *identity),
        )

    def hit_expensive(self, address: str, key_id: str) -> None:
        """Count one expensive operation per key and per address; raise when either is over.

        A refused request counts against neither (a key is not charged for its address's
        neighbours), so both are tested before either is hit."""
        item = self._expensive
        if item is None:
            return
        identities = (("key", key_id), ("address", address))
        for identity in identities:
            if not self._limiter.test(item, _EXPENSIVE, *identity):
                self._refuse_expensive(item, identity)
        for identity in identities:
            if not self._limiter.hit(item, _EXPENSIVE, *identity):  # lost a race to the limit
                self._refuse_expensive(item, identity)

    def _refuse_expensive(self, item: limits.RateLimitItem, identity: tuple[str, str]) -> NoReturn:
        raise RateLimitedError(
            f"too many expensive operations from this {identity[0]} (limit {item}); "
            "try again later",
            retry_after=self._retry_after(item, _EXPENSIVE, *identity),
        )
