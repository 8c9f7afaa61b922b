"""The HTTP session under :class:`privfit_client.Client`: auth, idempotency keys and retries.

Every POST carries an ``Idempotency-Key`` chosen once per call and reused by its retries.
Which failures are retried depends on whether a repeat is harmless:

* reads (GET, DELETE) and POSTs the API makes idempotent (fits and federated fits honour the
  key; predictions and dry runs change nothing) are retried on connection errors, timeouts,
  429 and 5xx;
* any other POST (an upload, a study, an aggregation) is retried only when it cannot have
  been acted on: the connection was never made, or the server answered 429 or 503.

Waits grow exponentially with jitter, and a ``Retry-After`` header (seconds or an HTTP date)
sets the wait instead.
"""

from __future__ import annotations

import email.utils
import random
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from privfit_client._version import __version__
from privfit_client.errors import problem_from_response

__all__ = ["KEYED_POSTS", "RETRY_STATUSES", "RetryPolicy", "Session", "is_keyed_post"]

#: Statuses worth another attempt (for requests that may be repeated).
RETRY_STATUSES: Final[frozenset[int]] = frozenset({429, 500, 502, 503, 504})
#: Statuses that say the request was not acted on, so even a non-idempotent POST may repeat.
_REFUSED_STATUSES: Final[frozenset[int]] = frozenset({429, 503})
#: The POST operations whose ``Idempotency-Key`` the server honours (a repeat returns the
#: first answer and charges nothing twice); tests/client checks this against the OpenAPI document.
KEYED_POSTS: Final[frozenset[str]] = frozenset(
    {
        "/v1/datasets/{dataset_id}/fits",
        "/v1/models/{model_id}/evaluations",
        "/v1/studies/{study_id}/aggregations",
        "/v1/studies/{study_id}/federated-fits",
    }
)
_KEYED_POST_PATTERNS: Final = tuple(
    re.compile("^" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template)) + "$")
    for template in sorted(KEYED_POSTS)
)
#: Transport errors raised before the request reached the server.
_NOT_SENT: Final = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_IDEMPOTENT_METHODS: Final[frozenset[str]] = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a request is repeated.

    ``attempts`` counts the first try; waits start at ``backoff`` seconds and double up to
    ``max_backoff`` (with jitter); a ``Retry-After`` is honoured up to ``max_retry_after``.
    """

    attempts: int = 5
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_retry_after: float = 300.0


class _RetryableStatus(Exception):
    """An answer with a status in :data:`RETRY_STATUSES`, raised so tenacity can retry it."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


def retry_after_seconds(response: httpx.Response, *, now: datetime | None = None) -> float | None:
    """The wait a ``Retry-After`` header asks for (delta-seconds or an HTTP date), else None."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def is_keyed_post(path: str) -> bool:
    """Whether ``path`` is a POST operation that honours the ``Idempotency-Key``."""
    return any(pattern.match(path) for pattern in _KEYED_POST_PATTERNS)


class Session:
    """An ``httpx.Client`` bound to one PrivFit server and key, with retries."""

    def __init__(
        self,
        base_url: str,
        key: str | None,
        *,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"User-Agent": f"privfit-client/{__version__} httpx/{httpx.__version__}"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.base_url = base_url
        self.retry = retry or RetryPolicy()
        self.http = httpx.Client(
            base_url=base_url, headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        body: Callable[[], Mapping[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool | None = None,
        idempotency_key: str | None = None,
    ) -> httpx.Response:
        """Send a request (retrying what is safe to retry); raise a :class:`ProblemError` for
        an error answer. ``body`` builds fresh ``files``/``content`` arguments per attempt;
        ``idempotent`` says whether a repeat is harmless (default: by method, and for a POST
        whether the server honours its idempotency key)."""
        method = method.upper()
        send_headers = dict(headers or {})
        if method == "POST":
            send_headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        if idempotent is not None:
            repeatable = idempotent
        elif method == "POST":
            repeatable = is_keyed_post(path)
        else:
            repeatable = method in _IDEMPOTENT_METHODS

        def should_retry(exc: BaseException) -> bool:
            if isinstance(exc, _RetryableStatus):
                return repeatable or exc.response.status_code in _REFUSED_STATUSES
            if isinstance(exc, _NOT_SENT):
                return True
            return repeatable and isinstance(exc, httpx.TransportError)

        def send() -> httpx.Response:
            request = self.http.build_request(
                method,
                path,
                params=dict(params) if params else None,
                json=json,
                headers=send_headers,
                **(dict(body()) if body else {}),
            )
            response = self.http.send(request)
            if response.status_code in RETRY_STATUSES:
                raise _RetryableStatus(response)
            return response

        retrying = Retrying(
            stop=stop_after_attempt(max(1, self.retry.attempts)),
            wait=self._wait,
            retry=retry_if_exception(should_retry),
            reraise=True,
        )
        try:
            response = retrying(send)
        except _RetryableStatus as exc:
            response = exc.response
        if response.is_error:
            raise problem_from_response(response)
        return response

    def _wait(self, state: RetryCallState) -> float:
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, _RetryableStatus):
            asked = retry_after_seconds(exc.response)
            if asked is not None:
                return min(asked, self.retry.max_retry_after)
        policy = self.retry
        exponential: float = policy.backoff * 2.0 ** max(0, state.attempt_number - 1)
        return min(policy.max_backoff, exponential + random.uniform(0, policy.backoff))
