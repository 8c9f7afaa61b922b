"""The audit log (read-only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import AdminDep, UowDep, access
from service.api.errors import problem_responses
from service.api.inert_json import InertJSONResponse
from service.api.json_body import JsonRoute
from service.api.routes import API_V1
from service.api.schemas.audit import AuditEventList, AuditEventRead
from service.domain import audit

router = APIRouter(prefix=f"{API_V1}/audit-events", tags=["audit"], route_class=JsonRoute)

Action = Annotated[
    str | None,
    Query(
        max_length=64,
        pattern=r"^[a-z0-9_.]+$",
        description="Only events of this action, e.g. `auth.failed`.",
    ),
]
Limit = Annotated[int, Query(ge=1, le=500, description="Page size.")]
Offset = Annotated[int, Query(ge=0, le=1_000_000_000, description="Items to skip.")]


@router.get(
    "",
    summary="List audit events (admin)",
    description=(
        "Security-relevant events, newest first: sites created, keys rotated, failed "
        "authentications (never the key itself, only its public prefix). Requires the admin key. "
        "Names chosen by sites (in `details`) are shown inert: any Unicode bidirectional control "
        "in them is written as its JSON escape (e.g. `\\u202e`), so the log cannot reorder "
        "what a reader sees."
    ),
    response_model=AuditEventList,
    response_class=InertJSONResponse,
    response_description="One page of audit events, newest first.",
    responses=problem_responses(401, 403, 422),
    openapi_extra=access("admin"),
)
def list_audit_events(
    uow: UowDep, admin: AdminDep, action: Action = None, limit: Limit = 100, offset: Offset = 0
) -> AuditEventList:
    events = audit.list_events(uow, actor=admin, action=action, limit=limit, offset=offset)
    return AuditEventList(
        items=[AuditEventRead.model_validate(event) for event in events],
        limit=limit,
        offset=offset,
    )
