"""SiteRepository: sites."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select, update

from service.db.models import (
    Site,
)
from service.db.repositories.base import Repository, rowcount


class SiteRepository(Repository[Site]):
    """Sites."""

    model = Site

    def get_by_name(self, name: str) -> Site | None:
        """The site called ``name`` (names are unique), or None."""
        return self.session.scalars(select(Site).where(Site.name == name)).one_or_none()

    def get_by_name_key(self, name_key: str) -> Site | None:
        """The site whose normalised name is ``name_key`` (unique), or None."""
        return self.session.scalars(select(Site).where(Site.name_key == name_key)).one_or_none()

    def hold_active(self, site_id: str) -> bool:
        """Whether the site is still active, as committed now; a write (changing nothing) that
        holds the site's row until the transaction ends, so a concurrent :meth:`deactivate`
        waits for this transaction and sees what it wrote (PostgreSQL row lock; SQLite's one
        writer at a time)."""
        result = self.session.execute(
            update(Site)
            .where(Site.id == site_id, Site.deactivated_at.is_(None))
            .values(deactivated_at=None)
            .execution_options(synchronize_session=False)
        )
        return rowcount(result) == 1

    def deactivate(self, site_id: str, *, at: datetime) -> bool:
        """Mark an active site deactivated; False when it already was (or a racing call won)."""
        result = self.session.execute(
            update(Site)
            .where(Site.id == site_id, Site.deactivated_at.is_(None))
            .values(deactivated_at=at)
            .execution_options(synchronize_session="fetch")
        )
        return rowcount(result) == 1

    def list_page(self, *, limit: int, offset: int) -> Sequence[Site]:
        """Sites in creation order."""
        query = select(Site).order_by(Site.created_at, Site.id).limit(limit).offset(offset)
        return self.session.scalars(query).all()

    def count(self) -> int:
        """Number of sites."""
        return self.session.scalar(select(func.count()).select_from(Site)) or 0
