"""Typed exceptions for PrivFit's problem documents (RFC 9457 ``application/problem+json``).

Every error response becomes a :class:`ProblemError`; the class is chosen by the problem's
``type`` (stable, unlike ``detail``), and by the status when the type is unknown::

    try:
        client.fit(dataset_id, epsilon=10.0)
    except BudgetExhausted as exc:
        print(exc.remaining_epsilon)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from privfit_client.models import JobRead, ValidationIssue

__all__ = [
    "PROBLEM_TYPE_BASE",
    "BudgetExhausted",
    "Conflict",
    "Forbidden",
    "JobFailed",
    "NotFound",
    "PayloadTooLarge",
    "PrivFitError",
    "ProblemError",
    "RateLimited",
    "ServerError",
    "Unauthenticated",
    "ValidationFailed",
    "problem_from_response",
]

#: Problem types are this base plus a slug, e.g. ``…/problems/budget-exhausted``.
PROBLEM_TYPE_BASE = "https://privfit.dev/problems/"


class PrivFitError(Exception):
    """Base of every error the client raises on purpose."""


class ProblemError(PrivFitError):
    """The server answered with an error status; the fields of its problem document."""

    #: Problem-type slugs this class stands for (the last segment of ``type``).
    slugs: tuple[str, ...] = ()

    def __init__(self, problem: Mapping[str, Any], response: httpx.Response | None = None) -> None:
        self.problem: dict[str, Any] = dict(problem)
        self.response = response
        self.type: str = str(problem.get("type", "about:blank"))
        self.title: str = str(problem.get("title", ""))
        self.status: int = int(problem.get("status", response.status_code if response else 0))
        self.detail: str | None = problem.get("detail")
        self.instance: str | None = problem.get("instance")
        self.request_id: str | None = problem.get("request_id")
        self.errors: list[ValidationIssue] = [
            ValidationIssue.model_validate(item) for item in problem.get("errors") or []
        ]
        super().__init__(self._message())

    @property
    def slug(self) -> str:
        """The last segment of ``type`` (``budget-exhausted``)."""
        return self.type.rstrip("/").rsplit("/", 1)[-1]

    def _message(self) -> str:
        text = f"{self.status} {self.title or self.slug}"
        if self.detail:
            text += f": {self.detail}"
        for issue in self.errors[:5]:
            text += f"\n  - {'.'.join(str(p) for p in issue.loc)}: {issue.msg}"
        if len(self.errors) > 5:
            text += f"\n  ... and {len(self.errors) - 5} more"
        return text


class Unauthenticated(ProblemError):
    """401: no key, or a wrong or revoked one."""

    slugs = ("unauthenticated",)


class Forbidden(ProblemError):
    """403: the key may not do this (an admin-only call with a site key, or the reverse)."""

    slugs = ("permission-denied",)


class NotFound(ProblemError):
    """404: no such resource, or another site's."""

    slugs = ("not-found",)


class Conflict(ProblemError):
    """409: the request conflicts with the current state (a finished job, a deleted dataset)."""

    slugs: tuple[str, ...] = ("conflict", "dataset-deleted", "duplicate-charge")


class BudgetExhausted(Conflict):
    """409: the privacy budget cannot cover the spend; nothing was charged."""

    slugs = ("budget-exhausted",)

    @property
    def remaining_epsilon(self) -> float | None:
        """The ε left on the dataset (or the study's grant) that was short."""
        return _number(self.problem.get("remaining_epsilon"))

    @property
    def remaining_delta(self) -> float | None:
        """The δ left on the dataset (or the study's grant) that was short."""
        return _number(self.problem.get("remaining_delta"))

    @property
    def dataset_id(self) -> str | None:
        """The dataset whose budget was short."""
        value = self.problem.get("dataset_id")
        return None if value is None else str(value)


class ValidationFailed(ProblemError):
    """422: the request (or an uploaded file) is invalid; ``errors`` names every part."""

    slugs = (
        "validation-failed",
        "invalid-input",
        "invalid-upload",
        "invalid-dataset",
        "invalid-dataset-spec",
        "invalid-dataset-file",
        "missing-values",
    )


class PayloadTooLarge(ProblemError):
    """413: the body is larger than the server accepts."""

    slugs = ("payload-too-large",)


class RateLimited(ProblemError):
    """429: too many requests (retried with backoff before this is raised)."""

    slugs = ("rate-limited", "too-many-requests")


class ServerError(ProblemError):
    """5xx: the server failed (retried with backoff before this is raised)."""

    slugs = ("internal-error", "service-unavailable")


class JobFailed(PrivFitError):
    """A job ended ``failed`` or ``cancelled``; ``job`` is its final state."""

    def __init__(self, job: JobRead) -> None:
        self.job = job
        reason = f": {job.error.title}: {job.error.detail}" if job.error else ""
        super().__init__(f"job {job.id} {job.status}{reason}")


_BY_SLUG: dict[str, type[ProblemError]] = {
    slug: cls
    for cls in (
        Unauthenticated,
        Forbidden,
        NotFound,
        Conflict,
        BudgetExhausted,
        ValidationFailed,
        PayloadTooLarge,
        RateLimited,
        ServerError,
    )
    for slug in cls.slugs
}
_BY_STATUS: dict[int, type[ProblemError]] = {
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: ValidationFailed,
    429: RateLimited,
}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def error_class(problem_type: str, status: int) -> type[ProblemError]:
    """The exception class for a problem ``type`` (by its slug), else for the status."""
    slug = problem_type.rstrip("/").rsplit("/", 1)[-1]
    if problem_type.startswith(PROBLEM_TYPE_BASE) and slug in _BY_SLUG:
        return _BY_SLUG[slug]
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, ProblemError)


def problem_from_response(response: httpx.Response) -> ProblemError:
    """The typed exception for an error response (a problem document or anything else)."""
    problem: dict[str, Any] = {}
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "type" in body:
        problem = body
    else:
        problem = {
            "type": "about:blank",
            "title": response.reason_phrase or "HTTP error",
            "status": response.status_code,
            "detail": response.text[:500] or None,
            "request_id": response.headers.get("x-request-id"),
        }
    cls = error_class(str(problem.get("type", "")), response.status_code)
    return cls(problem, response)
