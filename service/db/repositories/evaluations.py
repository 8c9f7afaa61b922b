"""EvaluationRepository: private evaluations of models."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select

from service.db.models import (
    Evaluation,
)
from service.db.repositories.base import Repository


class EvaluationRepository(Repository[Evaluation]):
    """Private evaluations of models."""

    model = Evaluation

    def list_for_model(
        self, model_id: str, *, owner_site_id: str | None, limit: int, offset: int
    ) -> Sequence[Evaluation]:
        """A model's evaluations, newest first (of one site, or all)."""
        query = select(Evaluation).where(Evaluation.model_id == model_id)
        if owner_site_id is not None:
            query = query.where(Evaluation.owner_site_id == owner_site_id)
        query = query.order_by(Evaluation.created_at.desc(), Evaluation.id)
        return self.session.scalars(query.limit(limit).offset(offset)).all()

    def count_for_model(self, model_id: str, *, owner_site_id: str | None) -> int:
        """How many evaluations :meth:`list_for_model` pages through."""
        query = select(func.count()).select_from(Evaluation)
        query = query.where(Evaluation.model_id == model_id)
        if owner_site_id is not None:
            query = query.where(Evaluation.owner_site_id == owner_site_id)
        return int(self.session.scalar(query) or 0)
