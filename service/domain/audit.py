"""The audit log of security-relevant events.

Use :func:`record` inside a unit of work: the event commits (or rolls back) with the change it
describes. Authentication failures are recorded in their own transaction. Events never contain
a secret: keys appear only by their public prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from service.db.models import AuditEvent
from service.db.uow import UnitOfWork
from service.domain.access.principal import Principal

__all__ = ["SYSTEM", "AuditContext", "Outcome", "list_events", "record"]

Outcome = Literal["success", "failure"]


@dataclass(frozen=True, slots=True)
class AuditContext:
    """Where a request came from, for the audit trail."""

    request_id: str | None = None
    client_ip: str | None = None


#: For work that is not triggered by a request (CLI, start-up).
SYSTEM = AuditContext()


def record(
    uow: UnitOfWork,
    *,
    action: str,
    context: AuditContext,
    outcome: Outcome = "success",
    actor: Principal | None = None,
    key_prefix: str | None = None,
    subject_type: str | None = None,
    subject_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Append an audit event to the open unit of work (committed with it)."""
    uow.audit.record(
        AuditEvent(
            action=action,
            outcome=outcome,
            actor_role=actor.role if actor is not None else None,
            actor_site_id=actor.site_id if actor is not None else None,
            key_prefix=key_prefix if key_prefix is not None else _prefix_of(actor),
            subject_type=subject_type,
            subject_id=subject_id,
            request_id=context.request_id,
            client_ip=context.client_ip,
            details=details,
        )
    )


def _prefix_of(actor: Principal | None) -> str | None:
    return actor.key_prefix if actor is not None else None


def list_events(
    uow: UnitOfWork, *, actor: Principal, action: str | None, limit: int, offset: int
) -> list[AuditEvent]:
    """Audit events, newest first (admin only)."""
    actor.require_admin()
    with uow:
        return list(uow.audit.list_page(action=action, limit=limit, offset=offset))
