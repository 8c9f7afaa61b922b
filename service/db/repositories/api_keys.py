"""ApiKeyRepository: API keys (hashes and prefixes only)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select, update

from service.db.models import (
    ApiKey,
)
from service.db.repositories.base import Repository


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
