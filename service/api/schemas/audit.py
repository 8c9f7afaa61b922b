"""Audit events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from service.api.schemas.base import ResponseModel

__all__ = ["AuditEventList", "AuditEventRead"]

_EXAMPLE: JsonDict = {
    "id": 42,
    "created_at": "2026-11-23T09:31:00Z",
    "action": "api_key.rotated",
    "outcome": "success",
    "actor_role": "site",
    "actor_site_id": "0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f6",
    "key_prefix": "k3x9q2ma",
    "subject_type": "site",
    "subject_id": "0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f6",
    "request_id": "4f1c2a9e8b7d4c3f9a0b1c2d3e4f5a6b",
    "client_ip": "203.0.113.7",
    "details": {"new_key_prefix": "a8c1m0zq", "revoked_key_prefixes": ["k3x9q2ma"]},
}


class AuditEventRead(ResponseModel):
    """A security-relevant event. Keys appear only by their public prefix."""

    model_config = ConfigDict(json_schema_extra={"examples": [_EXAMPLE]})

    id: int
    created_at: datetime
    action: str = Field(description="What happened, e.g. site.created, auth.failed.")
    outcome: str = Field(description="success or failure.")
    actor_role: str | None = Field(description="admin or site; null when unauthenticated.")
    actor_site_id: str | None
    key_prefix: str | None = Field(description="Public prefix of the key involved, if any.")
    subject_type: str | None
    subject_id: str | None
    request_id: str | None
    client_ip: str | None
    details: dict[str, Any] | None


class AuditEventList(ResponseModel):
    """One page of audit events, newest first."""

    items: list[AuditEventRead]
    limit: int
    offset: int
