"""AuditRepository: the append-only audit log."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from service.db.models import (
    AuditEvent,
)
from service.db.repositories.base import Repository


class AuditRepository(Repository[AuditEvent]):
    """The append-only audit log."""

    model = AuditEvent

    def record(self, event: AuditEvent) -> None:
        """Append an event (flushed with the rest of the unit of work)."""
        self.session.add(event)

    def list_page(
        self, *, action: str | None = None, limit: int = 100, offset: int = 0
    ) -> Sequence[AuditEvent]:
        """Events, newest first, optionally of one action."""
        query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit).offset(offset)
        if action is not None:
            query = query.where(AuditEvent.action == action)
        return self.session.scalars(query).all()
