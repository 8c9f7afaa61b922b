"""ModelRepository: released and uploaded models (classifiers)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select

from service.db.models import (
    Model,
)
from service.db.repositories.base import Repository


class ModelRepository(Repository[Model]):
    """Released and uploaded models."""

    model = Model

    def list_page(self, *, owner_site_id: str | None, limit: int, offset: int) -> Sequence[Model]:
        """Models newest first, of one site (or all)."""
        query = select(Model)
        if owner_site_id is not None:
            query = query.where(Model.owner_site_id == owner_site_id)
        query = query.order_by(Model.created_at.desc(), Model.id).limit(limit).offset(offset)
        return self.session.scalars(query).all()

    def count(self, *, owner_site_id: str | None) -> int:
        """How many models :meth:`list_page` pages through."""
        query = select(func.count()).select_from(Model)
        if owner_site_id is not None:
            query = query.where(Model.owner_site_id == owner_site_id)
        return int(self.session.scalar(query) or 0)
