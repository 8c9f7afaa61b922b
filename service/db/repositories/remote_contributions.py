"""RemoteContributionRepository (coordinator side): datasets kept on member sites' nodes
and offered to studies."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select, update

from service.db.models import (
    RemoteContribution,
)
from service.db.repositories.base import Repository, rowcount


class RemoteContributionRepository(Repository[RemoteContribution]):
    """Coordinator side: datasets kept on member sites' nodes and offered to studies."""

    model = RemoteContribution

    def of_study(self, study_id: str, *, active_only: bool = True) -> Sequence[RemoteContribution]:
        """A study's remote contributions, oldest first (only those not withdrawn by default)."""
        query = select(RemoteContribution).where(RemoteContribution.study_id == study_id)
        if active_only:
            query = query.where(RemoteContribution.withdrawn_at.is_(None))
        query = query.order_by(RemoteContribution.created_at, RemoteContribution.id)
        return self.session.scalars(query).all()

    def active_ids_of_site(self, site_id: str) -> list[str]:
        """The ids of a site's remote contributions that are not withdrawn."""
        query = select(RemoteContribution.id).where(
            RemoteContribution.site_id == site_id, RemoteContribution.withdrawn_at.is_(None)
        )
        return list(self.session.scalars(query).all())

    def withdraw(self, contribution_id: str, *, at: datetime) -> bool:
        """Mark a contribution withdrawn (once); False when it already was or is unknown."""
        result = self.session.execute(
            update(RemoteContribution)
            .where(
                RemoteContribution.id == contribution_id,
                RemoteContribution.withdrawn_at.is_(None),
            )
            .values(withdrawn_at=at)
            .execution_options(synchronize_session=False)
        )
        return rowcount(result) == 1
