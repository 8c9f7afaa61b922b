"""Dependencies shared by the routers, as ``Annotated`` aliases.

Handlers take ``uow: UowDep``, ``principal: PrincipalDep`` (any valid key), ``admin: AdminDep``
(the admin key only), ``site: SiteDep`` (a site key only) and ``audit_context: AuditContextDep``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.api.metrics import HttpMetrics
from service.api.rate_limits import RateLimits
from service.db.migrate import DatabaseProbe
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.auth import authenticate
from service.domain.access.keys import parse_prefix
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.errors import AuthenticationError
from service.domain.ids import MAX_IDEMPOTENCY_KEY_LENGTH
from service.domain.jobs.lifecycle import JobScheduler
from service.settings import Settings

__all__ = [
    "SECURITY_SCHEME_NAME",
    "AdminDep",
    "AuditContextDep",
    "DatabaseProbeDep",
    "DryRun",
    "Expensive",
    "HttpMetricsDep",
    "IdempotencyKey",
    "PreferWait",
    "PrincipalDep",
    "RunnerDep",
    "SettingsDep",
    "SiteDep",
    "UowDep",
    "UowFactoryDep",
    "access",
    "authenticate_request",
    "bearer_scheme",
    "bearer_token",
    "client_address",
]

SECURITY_SCHEME_NAME = "ApiKey"

#: HTTP bearer scheme: Swagger UI shows the Authorize button for it. ``auto_error=False`` so
#: a missing key is our own 401 problem, not FastAPI's plain error.
bearer_scheme = HTTPBearer(
    scheme_name=SECURITY_SCHEME_NAME,
    bearerFormat="pf_<prefix>_<secret>",
    description=(
        "An API key: the admin key, or a site's key from `POST /v1/sites`. In Swagger UI, "
        "click **Authorize** and paste the key alone (without `Bearer `)."
    ),
    auto_error=False,
)


async def get_settings_from_app(request: Request) -> Settings:
    """The settings the app was created with (async: no I/O, so no threadpool hop)."""
    settings: Settings = request.app.state.settings
    return settings


async def get_uow(request: Request) -> UnitOfWork:
    """A fresh unit of work on the app's database."""
    factory: UnitOfWorkFactory = request.app.state.uow_factory
    return factory()


async def get_uow_factory(request: Request) -> UnitOfWorkFactory:
    """The app's unit-of-work factory, for work that opens several transactions of its own."""
    factory: UnitOfWorkFactory = request.app.state.uow_factory
    return factory


async def get_database_probe(request: Request) -> DatabaseProbe:
    """The readiness probe of the app's database."""
    probe: DatabaseProbe = request.app.state.database_probe
    return probe


async def get_http_metrics(request: Request) -> HttpMetrics:
    """The app's Prometheus registry."""
    registry: HttpMetrics = request.app.state.metrics
    return registry


async def get_job_runner(request: Request) -> JobScheduler:
    """The app's job runner (set at start-up; a test may replace it)."""
    runner: JobScheduler = request.app.state.job_runner
    return runner


def audit_context_of(request: Request) -> AuditContext:
    """Request id and client address for audit events."""
    request_id = getattr(request.state, "request_id", None)
    # Behind a trusted proxy the address comes from X-Forwarded-For: bound it to the column.
    client = request.client.host[:64] if request.client is not None else None
    return AuditContext(request_id=request_id, client_ip=client)


async def get_audit_context(request: Request) -> AuditContext:
    """Request id and client address for audit events."""
    return audit_context_of(request)


SettingsDep = Annotated[Settings, Depends(get_settings_from_app)]
UowDep = Annotated[UnitOfWork, Depends(get_uow)]
AuditContextDep = Annotated[AuditContext, Depends(get_audit_context)]
RunnerDep = Annotated[JobScheduler, Depends(get_job_runner)]
UowFactoryDep = Annotated[UnitOfWorkFactory, Depends(get_uow_factory)]
DatabaseProbeDep = Annotated[DatabaseProbe, Depends(get_database_probe)]
HttpMetricsDep = Annotated[HttpMetrics, Depends(get_http_metrics)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]


def authenticate_request(request: Request, token: str | None) -> Principal:
    """The caller owning ``token`` (blocking: reads the database); 401 when it is missing or
    invalid, 429 when it is invalid and its address or prefix has failed too often.

    Only failures are counted and refused: a valid key is never refused here, whatever its
    address did (:mod:`service.api.rate_limits`)."""
    if not token:
        raise AuthenticationError("send an API key as `Authorization: Bearer <key>`")
    state = request.app.state
    rate_limits: RateLimits = state.rate_limits
    address = client_address(request)
    uow_factory: UnitOfWorkFactory = state.uow_factory
    try:
        return authenticate(
            uow_factory(),
            token=token,
            configured_admin_key_hash=state.admin_key_hash,
            context=audit_context_of(request),
            # Already refused for its failures: its further guesses add no audit rows.
            audit_failure=not rate_limits.address_over_limit(address),
        )
    except AuthenticationError:
        rate_limits.record_failed_authentication(address, parse_prefix(token))
        raise


def bearer_token(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header value, else None."""
    scheme, _, token = (authorization or "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def get_principal(request: Request, credentials: Credentials) -> Principal:
    """The caller, from ``Authorization: Bearer <key>``; 401 when missing or invalid.

    On ``/v1`` routes :class:`~service.api.middleware.AuthenticationMiddleware` has already
    authenticated the request, before its body was read; its principal is reused."""
    principal = getattr(request.state, "principal", None)
    if isinstance(principal, Principal):
        return principal
    return authenticate_request(request, credentials.credentials if credentials else None)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def client_address(request: Request) -> str:
    """The client's address (a trusted proxy's ``X-Forwarded-For`` already applied)."""
    return request.client.host if request.client is not None else "unknown"


async def count_expensive(request: Request, principal: PrincipalDep) -> None:
    """Count an expensive operation against the caller's key and address (429 when over)."""
    rate_limits: RateLimits = request.app.state.rate_limits
    key = principal.key_id or principal.role
    rate_limits.hit_expensive(client_address(request), key)


#: Route dependency of the expensive operations (uploads, fits, aggregations, predictions).
Expensive = Depends(count_expensive)


async def get_admin(principal: PrincipalDep) -> Principal:
    """The caller, who must hold the admin key (403 otherwise)."""
    principal.require_admin()
    return principal


async def get_site(principal: PrincipalDep) -> Principal:
    """The caller, who must hold a site key (403 otherwise)."""
    principal.require_site()
    return principal


AdminDep = Annotated[Principal, Depends(get_admin)]
SiteDep = Annotated[Principal, Depends(get_site)]


def access(who: str) -> dict[str, str]:
    """``openapi_extra`` naming who may call a route: admin, site, owner, any (either key),
    public. ``site``: a site key (the admin key gets 403); ``owner``: a site key acting on one
    of its site's resources (to the admin key and other sites the resource does not exist: 404,
    as for an unknown id).

    The fuzz test reads it to choose the key; people read the route's description.
    """
    if who not in {"admin", "site", "owner", "any", "public"}:
        raise ValueError(f"unknown access level {who!r}")
    return {"x-privfit-access": who}


#: The ``Idempotency-Key`` header of requests that charge a budget.
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=MAX_IDEMPOTENCY_KEY_LENGTH,
        description="Makes the request safe to retry: a request repeated with the same key "
        "returns the first request's job, and nothing is charged twice.",
    ),
]
#: ``?dry_run=true``: quote a charged request without spending anything.
DryRun = Annotated[
    bool,
    Query(description="Only quote the cost and the calibration (200); nothing is spent."),
]


#: ``Prefer: wait=N`` (RFC 7240) on requests that queue a job: answer when the job has ended,
#: or after N seconds (at most 30) with the job as it then stands.
PreferWait = Annotated[
    str | None,
    Header(
        alias="Prefer",
        max_length=256,
        description="`wait=N` (seconds, at most 30): answer once the job has ended (201 with "
        "the finished job) or after N seconds (202 with the job as it then stands), so a "
        "client needs no second request to learn the outcome. Other preferences are ignored.",
    ),
]
