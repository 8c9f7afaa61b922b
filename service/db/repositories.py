"""Repositories: the only place that builds SQL.

Each repository wraps the unit of work's session. Repositories never commit; they ``flush``
when the caller needs generated values. Add a repository per aggregate and expose it on
:class:`service.db.uow.UnitOfWork`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from service.db.base import Base
from service.db.errors import translate_integrity_errors
from service.db.models import ApiKey, AuditEvent, Site

__all__ = [
    "ApiKeyRepository",
    "AuditRepository",
    "Repository",
    "SiteRepository",
]

ModelT = TypeVar("ModelT", bound=Base)


class Repository(Generic[ModelT]):
    """Common operations on one model keyed by a single primary key."""

    model: type[ModelT]

    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, id_: Any) -> ModelT | None:
        """The row with primary key ``id_``, or None."""
        return self.session.get(self.model, id_)

    def add(self, obj: ModelT) -> ModelT:
        """Stage ``obj`` for insertion and flush, so defaults and ids are filled in."""
        self.session.add(obj)
        with translate_integrity_errors():
            self.session.flush()
        return obj


class SiteRepository(Repository[Site]):
    """Sites."""

    model = Site

    def get_by_name(self, name: str) -> Site | None:
        """The site called ``name`` (names are unique), or None."""
        return self.session.scalars(select(Site).where(Site.name == name)).one_or_none()

    def list_page(self, *, limit: int, offset: int) -> Sequence[Site]:
        """Sites in creation order."""
        query = select(Site).order_by(Site.created_at, Site.id).limit(limit).offset(offset)
        return self.session.scalars(query).all()

    def count(self) -> int:
        """Number of sites."""
        return self.session.scalar(select(func.count()).select_from(Site)) or 0


class ApiKeyRepository(Repository[ApiKey]):
    """API keys (hashes and prefixes only)."""

    model = ApiKey

    def get_by_prefix(self, prefix: str) -> ApiKey | None:
        """The key with this public prefix (prefixes are unique), revoked or not."""
        return self.session.scalars(select(ApiKey).where(ApiKey.prefix == prefix)).one_or_none()

    def active_admin_key(self) -> ApiKey | None:
        """The stored admin key still in force, if any."""
        query = select(ApiKey).where(ApiKey.role == "admin", ApiKey.revoked_at.is_(None))
        return self.session.scalars(query).one_or_none()

    def active_for_site(self, site_id: str) -> Sequence[ApiKey]:
        """A site's keys still in force."""
        query = (
            select(ApiKey)
            .where(ApiKey.site_id == site_id, ApiKey.revoked_at.is_(None))
            .order_by(ApiKey.created_at)
        )
        return self.session.scalars(query).all()

    def revoke(self, key_id: str, *, at: datetime) -> bool:
        """Revoke a key still in force. False when it was already revoked (a racing rotation)."""
        result = self.session.execute(
            update(ApiKey)
            .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
            .values(revoked_at=at)
            .execution_options(synchronize_session="fetch")
        )
        return bool(getattr(result, "rowcount", 0) == 1)

    def revoke_admin_keys(self, *, at: datetime) -> int:
        """Revoke every stored admin key; returns how many were in force."""
        result = self.session.execute(
            update(ApiKey)
            .where(ApiKey.role == "admin", ApiKey.revoked_at.is_(None))
            .values(revoked_at=at)
            .execution_options(synchronize_session="fetch")
        )
        return int(getattr(result, "rowcount", 0))


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
