"""Domain errors. They carry no HTTP knowledge: ``service.api.errors`` maps them to responses.

Every error has a stable ``slug`` (the problem ``type`` in responses), a short ``title`` and a
``detail`` that is safe to show to the caller: never a secret, never a data value, never a row
count of somebody else's dataset. Extra machine-readable fields go in :meth:`extensions`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

__all__ = [
    "AuthenticationError",
    "BudgetExhaustedError",
    "ConflictError",
    "DomainError",
    "InvalidInputError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitedError",
]


def _kebab(name: str) -> str:
    name = name.removesuffix("Error")
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


class DomainError(Exception):
    """Base of every error a use case raises on purpose."""

    #: Stable identifier, used as the last segment of the problem ``type`` URI.
    slug: ClassVar[str] = "domain"
    #: Short human summary, the same for every occurrence (RFC 9457 ``title``).
    title: ClassVar[str] = "Request failed"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "slug" not in cls.__dict__:
            cls.slug = _kebab(cls.__name__)

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    def extensions(self) -> dict[str, Any]:
        """Extra members for the problem document (JSON-serialisable)."""
        return {}


class NotFoundError(DomainError):
    """The resource does not exist, or the caller may not know that it exists."""

    title = "Not found"

    def __init__(self, resource: str, detail: str | None = None) -> None:
        super().__init__(detail or f"{resource} not found")
        self.resource = resource


class AuthenticationError(DomainError):
    """No credentials, or credentials that are unknown, malformed or revoked."""

    slug = "unauthenticated"
    title = "Authentication required"


class PermissionDeniedError(DomainError):
    """Authenticated, but this caller may not perform this operation."""

    title = "Permission denied"


class ConflictError(DomainError):
    """The request conflicts with the current state (a duplicate name, a concurrent change)."""

    title = "Conflict"


class InvalidInputError(DomainError):
    """The input is well-formed but breaks a rule of the domain.

    ``errors`` optionally lists ``{"loc": [...], "msg": "..."}`` items, like validation errors.
    """

    title = "Invalid input"

    def __init__(self, detail: str, *, errors: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(detail)
        self.errors = [dict(item) for item in errors]

    def extensions(self) -> dict[str, Any]:
        return {"errors": self.errors} if self.errors else {}


class BudgetExhaustedError(DomainError):
    """The privacy budget cannot cover the requested spend; nothing was charged."""

    title = "Privacy budget exhausted"

    def __init__(
        self,
        detail: str,
        *,
        remaining_epsilon: float,
        remaining_delta: float,
        requested_epsilon: float | None = None,
        requested_delta: float | None = None,
    ) -> None:
        super().__init__(detail)
        self.remaining_epsilon = remaining_epsilon
        self.remaining_delta = remaining_delta
        self.requested_epsilon = requested_epsilon
        self.requested_delta = requested_delta

    def extensions(self) -> dict[str, Any]:
        members: dict[str, Any] = {
            "remaining_epsilon": self.remaining_epsilon,
            "remaining_delta": self.remaining_delta,
        }
        if self.requested_epsilon is not None:
            members["requested_epsilon"] = self.requested_epsilon
        if self.requested_delta is not None:
            members["requested_delta"] = self.requested_delta
        return members


class RateLimitedError(DomainError):
    """Too many requests of a kind from one client or key; retry after ``retry_after`` s."""

    slug = "rate-limited"
    title = "Too many requests"

    def __init__(self, detail: str, *, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after

    def extensions(self) -> dict[str, Any]:
        return {"retry_after": self.retry_after}


class UpstreamError(DomainError):
    """Another PrivFit this one depends on (a node's coordinator, issue 15) could not be
    reached or refused the request; ``detail`` says which and why, never data."""

    title = "Upstream service failed"
