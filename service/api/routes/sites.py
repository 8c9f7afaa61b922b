"""Sites and their API keys."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from service.api.deps import AdminDep, AuditContextDep, PrincipalDep, SiteDep, UowDep, access
from service.api.errors import problem_responses
from service.api.json_body import JsonRoute
from service.api.routes import API_V1
from service.api.schemas.base import page_read
from service.api.schemas.sites import (
    CallerRead,
    IssuedKeyRead,
    SiteCreate,
    SiteList,
    SiteRead,
    SiteWithKey,
)
from service.domain.access import sites

router = APIRouter(prefix=f"{API_V1}/sites", tags=["sites"], route_class=JsonRoute)

Limit = Annotated[int, Query(ge=1, le=200, description="Page size.")]
Offset = Annotated[int, Query(ge=0, le=1_000_000_000, description="Items to skip.")]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    summary="Create a site (admin)",
    description=(
        "Creates a site and its first API key. **The key is in this response only**: hand it "
        "to the site now. Requires the admin key."
    ),
    response_model=SiteWithKey,
    response_description="The new site and its API key (shown only here).",
    responses=problem_responses(401, 403, 409, 413, 422),
    openapi_extra=access("admin"),
)
def create_site(
    body: SiteCreate, uow: UowDep, admin: AdminDep, audit_context: AuditContextDep
) -> SiteWithKey:
    issued = sites.create_site(uow, name=body.name, actor=admin, context=audit_context)
    return SiteWithKey.from_issued(issued)


@router.get(
    "",
    summary="List sites (admin)",
    description=(
        "Sites in creation order, paginated, deactivated ones included (with "
        "`deactivated_at`). Requires the admin key."
    ),
    response_model=SiteList,
    response_description="One page of sites and the total count.",
    responses=problem_responses(401, 403, 422),
    openapi_extra=access("admin"),
)
def list_sites(uow: UowDep, admin: AdminDep, limit: Limit = 50, offset: Offset = 0) -> SiteList:
    page = sites.list_sites(uow, actor=admin, limit=limit, offset=offset)
    return page_read(SiteList, page, SiteRead.from_row, limit=limit, offset=offset)


@router.get(
    "/me",
    summary="The calling site",
    description="The site that owns the API key of this request. Requires a site key.",
    response_model=SiteRead,
    response_description="The calling site.",
    responses=problem_responses(401, 403),
    openapi_extra=access("site"),
)
def get_my_site(uow: UowDep, site: SiteDep) -> SiteRead:
    assert site.site_id is not None
    return SiteRead.from_row(sites.get_site(uow, site_id=site.site_id, actor=site))


@router.get(
    "/whoami",
    summary="Who the key belongs to",
    description=(
        "The role of the key of this request: the admin key (`site` is null), or a site's key "
        "with its site. Any valid key; lets a page or a tool show the admin the site list and "
        "a site its data without a failing request."
    ),
    response_model=CallerRead,
    response_description="The caller's role and, for a site key, its site.",
    responses=problem_responses(401),
    openapi_extra=access("any"),
)
def whoami(uow: UowDep, principal: PrincipalDep) -> CallerRead:
    if principal.site_id is None:
        return CallerRead(role="admin", site=None)
    site = sites.get_site(uow, site_id=principal.site_id, actor=principal)
    return CallerRead(role="site", site=SiteRead.from_row(site))


@router.post(
    "/me/keys/rotate",
    summary="Rotate the calling site's key",
    description=(
        "Issues a new key and revokes the key used for this request (and any other key of the "
        "site). The old key stops working at once. **The new key is in this response only.** "
        "Requires a site key."
    ),
    response_model=IssuedKeyRead,
    response_description="The new key (shown only here); the old one is revoked.",
    responses=problem_responses(401, 403, 409),
    openapi_extra=access("site"),
)
def rotate_my_key(uow: UowDep, site: SiteDep, audit_context: AuditContextDep) -> IssuedKeyRead:
    assert site.site_id is not None
    issued = sites.rotate_site_key(uow, site_id=site.site_id, actor=site, context=audit_context)
    return SiteWithKey.from_issued(issued).key


@router.get(
    "/{site_id}",
    summary="Get a site",
    description="The admin can read any site; a site can read only itself (others are 404).",
    response_model=SiteRead,
    response_description="The site.",
    responses=problem_responses(401, 404, 422),
    openapi_extra=access("any"),
)
def get_site(site_id: str, uow: UowDep, principal: PrincipalDep) -> SiteRead:
    return SiteRead.from_row(sites.get_site(uow, site_id=site_id, actor=principal))


@router.post(
    "/{site_id}/keys/rotate",
    summary="Rotate a site's key (admin)",
    description=(
        "For a site that lost its key: issues a new key and revokes all the site's other keys. "
        "**The new key is in this response only.** A deactivated site gets no key again (409). "
        "Requires the admin key."
    ),
    response_model=IssuedKeyRead,
    response_description="The site's new key (shown only here); its other keys are revoked.",
    responses=problem_responses(401, 403, 404, 409, 422),
    openapi_extra=access("admin"),
)
def rotate_site_key(
    site_id: str, uow: UowDep, admin: AdminDep, audit_context: AuditContextDep
) -> IssuedKeyRead:
    issued = sites.rotate_site_key(uow, site_id=site_id, actor=admin, context=audit_context)
    return SiteWithKey.from_issued(issued).key


@router.post(
    "/{site_id}/deactivate",
    summary="Deactivate a site (admin)",
    description=(
        "The one operation of the admin that concerns a site as a whole, e.g. for a "
        "data-protection request: revokes every key of the site at once (none is issued again) "
        "and records a `site.deactivated` audit event. The site's data (datasets and their "
        "ledgers, jobs, models, evaluations, studies, offers) is kept unchanged and stays out "
        "of the admin's reach, as always. Deactivating a deactivated site changes nothing. "
        "Requires the admin key."
    ),
    response_model=SiteRead,
    response_description="The site, with `deactivated_at` set.",
    responses=problem_responses(401, 403, 404, 422),
    openapi_extra=access("admin"),
)
def deactivate_site(
    site_id: str, uow: UowDep, admin: AdminDep, audit_context: AuditContextDep
) -> SiteRead:
    site = sites.deactivate_site(uow, site_id=site_id, actor=admin, context=audit_context)
    return SiteRead.from_row(site)
