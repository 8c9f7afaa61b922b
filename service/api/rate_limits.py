"""Rate limits on failed authentication and on expensive operations (the ``limits`` library).

Two rules, each configurable (``PRIVFIT_RATE_LIMIT_*``, in the ``limits`` notation such as
``"30/minute"``; empty turns a rule off):

* **failed authentication** — counted per client address and per presented key prefix. An
  address over its limit is answered 429 before any key is checked (guessing costs the
  attacker time, not the server or the audit log). A prefix over its limit turns further
  *failures* with that prefix into 429, but its owner's correct key still works: the prefix is
  public, so refusing it outright would let anyone lock a site out;
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

    def check_address_allowed(self, address: str) -> None:
        """Raise :class:`RateLimitedError` while this address is over its failed-auth limit."""
        self._refuse_if_over(self._failed_auth, ("address", address))

    def record_failed_authentication(self, address: str, key_prefix: str | None) -> None:
        """Count one failed authentication against the address and the presented prefix, then
        raise :class:`RateLimitedError` if the prefix is over its limit (429 instead of 401)."""
        item = self._failed_auth
        if item is None:
            return
        self._limiter.hit(item, _FAILED_AUTH, "address", address)
        if key_prefix:
            self._refuse_if_over(item, ("prefix", key_prefix))
            self._limiter.hit(item, _FAILED_AUTH, "prefix", key_prefix)

    def _refuse_if_over(self, item: limits.RateLimitItem | None, identity: tuple[str, str]) -> None:
        if item is not None and not self._limiter.test(item, _FAILED_AUTH, *identity):
            raise RateLimitedError(
                f"too many failed authentications {_WHOSE[identity[0]]}; try again later",
                retry_after=self._retry_after(item, _FAILED_AUTH, *identity),
            )

    def hit_expensive(self, address: str, key_id: str) -> None:
        """Count one expensive operation per key and per address; raise when either is over."""
        item = self._expensive
        if item is None:
            return
        for identity in (("key", key_id), ("address", address)):
            if not self._limiter.hit(item, _EXPENSIVE, *identity):
                raise RateLimitedError(
                    f"too many expensive operations from this {identity[0]} "
                    f"(limit {item}); try again later",
                    retry_after=self._retry_after(item, _EXPENSIVE, *identity),
                )
