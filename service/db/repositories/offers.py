"""OfferRepository (node side): this node's datasets offered to coordinators' studies,
and the jobs it runs for them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select, update

from service.db.errors import translate_integrity_errors
from service.db.models import (
    DatasetOffer,
    NodeJob,
)
from service.db.repositories.base import Repository, rowcount


class OfferRepository(Repository[DatasetOffer]):
    """Node side: this node's datasets offered to coordinators' studies, and the jobs it
    accepted under them."""

    model = DatasetOffer

    def of_dataset(self, dataset_id: str) -> Sequence[DatasetOffer]:
        query = (
            select(DatasetOffer)
            .where(DatasetOffer.dataset_id == dataset_id)
            .order_by(DatasetOffer.created_at, DatasetOffer.id)
        )
        return self.session.scalars(query).all()

    def by_contribution(self, contribution_id: str) -> DatasetOffer | None:
        query = select(DatasetOffer).where(DatasetOffer.contribution_id == contribution_id)
        return self.session.scalars(query).first()

    def withdraw(self, offer_id: str, *, at: datetime) -> bool:
        result = self.session.execute(
            update(DatasetOffer)
            .where(DatasetOffer.id == offer_id, DatasetOffer.withdrawn_at.is_(None))
            .values(withdrawn_at=at)
            .execution_options(synchronize_session=False)
        )
        return rowcount(result) == 1

    def debit(self, offer_id: str, epsilon_units: int, delta_units: int) -> bool:
        """Add a job's cost to the offer's spent amounts if it fits under its caps and the offer
        is not withdrawn: one conditional UPDATE (False when short, withdrawn or unknown)."""
        result = self.session.execute(
            update(DatasetOffer)
            .where(
                DatasetOffer.id == offer_id,
                DatasetOffer.withdrawn_at.is_(None),
                DatasetOffer.epsilon_spent_units + epsilon_units <= DatasetOffer.epsilon_cap_units,
                DatasetOffer.delta_spent_units + delta_units <= DatasetOffer.delta_cap_units,
            )
            .values(
                epsilon_spent_units=DatasetOffer.epsilon_spent_units + epsilon_units,
                delta_spent_units=DatasetOffer.delta_spent_units + delta_units,
            )
            .execution_options(synchronize_session=False)
        )
        return rowcount(result) == 1

    def job(self, offer_id: str, coordinator_job_id: str) -> NodeJob | None:
        query = select(NodeJob).where(
            NodeJob.offer_id == offer_id, NodeJob.coordinator_job_id == coordinator_job_id
        )
        return self.session.scalars(query).first()

    def add_job(self, job: NodeJob) -> NodeJob:
        with translate_integrity_errors():
            self.session.add(job)
            self.session.flush()
        return job

    def jobs_of_offer(self, offer_id: str) -> Sequence[NodeJob]:
        query = (
            select(NodeJob)
            .where(NodeJob.offer_id == offer_id)
            .order_by(NodeJob.created_at, NodeJob.id)
        )
        return self.session.scalars(query).all()

    def finish_job(self, job_id: str, *, status: str, error: str | None, at: datetime) -> bool:
        result = self.session.execute(
            update(NodeJob)
            .where(NodeJob.id == job_id, NodeJob.status == "accepted")
            .values(status=status, error=error, finished_at=at)
            .execution_options(synchronize_session=False)
        )
        return rowcount(result) == 1
