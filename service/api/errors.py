"""One mapping from errors to RFC 9457 ``application/problem+json`` responses.

* :class:`~service.domain.errors.DomainError` subclasses map to a status by
  :data:`DOMAIN_ERROR_STATUS` (the nearest class in the MRO wins);
* request validation errors → 422 with an ``errors`` member;
* Starlette's HTTP errors (unknown route 404, wrong method 405, 413 from the size limit) keep
  their status;
* anything else → 500 with no internals (see :mod:`service.api.middleware`).

Routes document their errors with :func:`problem_responses`, so they appear in OpenAPI.
"""

from __future__ import annotations

import http
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.api.json_body import JsonBodyTooDeepError
from service.api.schemas.problem import PROBLEM_MEDIA_TYPE, PROBLEM_TYPE_BASE, Problem
from service.domain.errors import (
    AuthenticationError,
    BudgetExhaustedError,
    ConflictError,
    DomainError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    UpstreamError,
)

__all__ = [
    "DOMAIN_ERROR_STATUS",
    "PROBLEM_MEDIA_TYPE",
    "ProblemResponse",
    "domain_error_response",
    "install_error_handlers",
    "internal_error_response",
    "problem_response",
    "problem_responses",
]

logger = logging.getLogger(__name__)

DOMAIN_ERROR_STATUS: dict[type[DomainError], int] = {
    DomainError: 400,
    AuthenticationError: 401,
    PermissionDeniedError: 403,
    NotFoundError: 404,
    ConflictError: 409,
    BudgetExhaustedError: 409,
    InvalidInputError: 422,
    RateLimitedError: 429,
    UpstreamError: 502,
}

#: Problem types of errors raised outside the domain: (slug, title) by status.
_HTTP_PROBLEMS: dict[int, tuple[str, str]] = {
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    413: ("payload-too-large", "Request body too large"),
    415: ("unsupported-media-type", "Unsupported media type"),
    422: ("validation-failed", "Request validation failed"),
    500: ("internal-error", "Internal server error"),
    503: ("service-unavailable", "Service unavailable"),
}


class ProblemResponse(JSONResponse):
    """A JSON response with the ``application/problem+json`` media type."""

    media_type = PROBLEM_MEDIA_TYPE


def status_for(exc: DomainError) -> int:
    """The HTTP status of a domain error (by its nearest mapped base class)."""
    for cls in type(exc).__mro__:
        if cls in DOMAIN_ERROR_STATUS:
            return DOMAIN_ERROR_STATUS[cls]
    return 400  # pragma: no cover - DomainError itself is mapped


def _request_id(request: Request) -> str | None:
    value = getattr(request.state, "request_id", None)
    return value if isinstance(value, str) else None


def problem_response(
    request: Request,
    *,
    status: int,
    slug: str,
    title: str,
    detail: str | None,
    extensions: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> ProblemResponse:
    """Build a problem+json response for ``request``."""
    problem = Problem(
        type=PROBLEM_TYPE_BASE + slug,
        title=title,
        status=status,
        detail=detail,
        instance=request.url.path,
        request_id=_request_id(request),
        **dict(extensions or {}),
    )
    return ProblemResponse(problem.body(), status_code=status, headers=dict(headers or {}))


def internal_error_response(request: Request) -> ProblemResponse:
    """The 500 response: nothing about the failure itself, only the request id to quote."""
    slug, title = _HTTP_PROBLEMS[500]
    return problem_response(
        request,
        status=500,
        slug=slug,
        title=title,
        detail="An unexpected error occurred. Quote the request id when reporting it.",
    )


async def _domain_error(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, DomainError)
    return domain_error_response(request, exc)


def domain_error_response(
    request: Request, exc: DomainError, *, close: bool = False
) -> ProblemResponse:
    """The problem response of a domain error (also for middleware, which runs outside the
    app's handlers); ``close`` asks the server to close the connection (a body left unread)."""
    status = status_for(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if isinstance(exc, RateLimitedError):
        headers = {"Retry-After": str(exc.retry_after)}
    if close:
        headers = {**(headers or {}), "Connection": "close"}
    return problem_response(
        request,
        status=status,
        slug=exc.slug,
        title=exc.title,
        detail=exc.detail,
        extensions=exc.extensions(),
        headers=headers,
    )


def _issue(error: Mapping[str, Any]) -> dict[str, Any]:
    # Drop "input" and "ctx": they can echo submitted values back into responses and logs.
    return {
        "loc": [part if isinstance(part, int) else str(part) for part in error.get("loc", ())],
        "msg": str(error.get("msg", "invalid value")),
        "type": str(error.get("type", "value_error")),
    }


async def _validation_error(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, RequestValidationError)
    issues = [_issue(error) for error in exc.errors()]
    slug, title = _HTTP_PROBLEMS[422]
    return problem_response(
        request,
        status=422,
        slug=slug,
        title=title,
        detail=f"the request has {len(issues)} invalid part(s); see errors",
        extensions={"errors": issues},
    )


async def _json_too_deep(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, JsonBodyTooDeepError)
    slug, title = _HTTP_PROBLEMS[422]
    return problem_response(
        request,
        status=422,
        slug=slug,
        title=title,
        detail=str(exc.detail),
        extensions={"errors": [{"loc": ["body"], "msg": exc.detail, "type": "json_too_deep"}]},
    )


async def _http_error(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    if status == 400 and exc.__cause__ is not None:
        # FastAPI answers 400 when a body cannot even be decoded (not UTF-8, nested too deep)
        # but 422 when it is not JSON; both are the same client mistake, so both are 422 here.
        slug, title = _HTTP_PROBLEMS[422]
        return problem_response(
            request,
            status=422,
            slug=slug,
            title=title,
            detail="the request body cannot be decoded",
            extensions={
                "errors": [{"loc": ["body"], "msg": "not decodable JSON", "type": "json_invalid"}]
            },
        )
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    slug, title = _HTTP_PROBLEMS.get(status, (phrase.lower().replace(" ", "-"), phrase))
    detail = exc.detail if isinstance(exc.detail, str) and exc.detail != phrase else None
    if detail is None and status == 404:
        detail = "no route matches this path"
    if detail is None and status == 405:
        detail = "this path does not support this method"
    return problem_response(
        request,
        status=status,
        slug=slug,
        title=title,
        detail=detail,
        headers=exc.headers,
    )


def install_error_handlers(app: FastAPI) -> None:
    """Register every problem+json handler on ``app``."""
    app.add_exception_handler(DomainError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(JsonBodyTooDeepError, _json_too_deep)


# --- OpenAPI documentation of error responses -------------------------------------------------

_DESCRIPTIONS: dict[int, str] = {
    400: "Bad request.",
    401: "Missing, malformed, unknown or revoked API key.",
    403: "The key is valid but may not call this operation (admin-only, or site-only).",
    404: "No such resource, or another site's (for the admin key: any site's resource).",
    409: "Conflicts with the current state.",
    413: "The request body is larger than the server accepts.",
    415: "The body is not of a media type this operation accepts.",
    422: "The request is malformed or breaks a rule; `errors` lists every invalid part.",
    429: (
        "Too many failed authentications from this address or key prefix, or too many "
        "expensive operations from this key or address (`PRIVFIT_RATE_LIMIT_*`); retry after "
        "`Retry-After` seconds."
    ),
    500: "Unexpected failure. The body never contains internals; quote `request_id`.",
    502: "The coordinator (another PrivFit) could not be reached or refused; `detail` says why.",
    503: "A dependency (the database) is not ready.",
}

_EXAMPLE_DETAILS: dict[int, tuple[str, str, str]] = {
    400: ("domain", "Request failed", "the request cannot be processed"),
    401: ("unauthenticated", "Authentication required", "the API key is not valid"),
    403: ("permission-denied", "Permission denied", "this operation needs the admin key"),
    404: ("not-found", "Not found", "site not found"),
    409: ("conflict", "Conflict", "a site with this name already exists"),
    413: (
        "payload-too-large",
        "Request body too large",
        "the request body exceeds 268435456 bytes",
    ),
    415: (
        "unsupported-media-type",
        "Unsupported media type",
        "send the upload as multipart/form-data",
    ),
    422: (
        "validation-failed",
        "Request validation failed",
        "the request has 1 invalid part(s); see errors",
    ),
    429: (
        "rate-limited",
        "Too many requests",
        "too many failed authentications from this client address; try again later",
    ),
    500: ("internal-error", "Internal server error", "An unexpected error occurred."),
    502: (
        "upstream",
        "Upstream service failed",
        "the coordinator answered 404: study not found",
    ),
    503: ("service-unavailable", "Service unavailable", "the database is not reachable"),
}


def problem_example(status: int, instance: str = "/v1/sites") -> dict[str, Any]:
    """A realistic problem document for ``status``, for the OpenAPI examples."""
    slug, title, detail = _EXAMPLE_DETAILS[status]
    example: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + slug,
        "title": title,
        "status": status,
        "detail": detail,
        "instance": instance,
        "request_id": "4f1c2a9e8b7d4c3f9a0b1c2d3e4f5a6b",
    }
    if status == 422:
        example["errors"] = [{"loc": ["body", "name"], "msg": "Field required", "type": "missing"}]
    return example


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries documenting these error statuses as problem+json (with examples).

    ``service.api.openapi_doc`` moves the schema to the problem+json media type; 500 is added to
    every operation there.
    """
    return {
        status: {
            "model": Problem,
            "description": _DESCRIPTIONS[status],
            "content": {PROBLEM_MEDIA_TYPE: {"example": problem_example(status)}},
        }
        for status in statuses
    }
