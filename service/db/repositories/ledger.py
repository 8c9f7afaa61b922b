"""LedgerRepository: budget charges and the atomic debit/credit of a dataset's spent
amounts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import bindparam, select, update

from service.db.models import (
    Dataset,
    Job,
    LedgerCharge,
)
from service.db.repositories.base import Repository, rowcount

# Statements on the path of every fit job, built once (their compiled form is cached by
# SQLAlchemy anyway; building the statement objects is what these save).

#: Charge a live dataset if the cost fits under both caps (:meth:`LedgerRepository.debit`).
_DEBIT = (
    update(Dataset)
    .where(
        Dataset.id == bindparam("dataset_id"),
        Dataset.deleted_at.is_(None),
        Dataset.epsilon_spent_units + bindparam("eps") <= Dataset.epsilon_cap_units,
        Dataset.delta_spent_units + bindparam("delta") <= Dataset.delta_cap_units,
    )
    .values(
        epsilon_spent_units=Dataset.epsilon_spent_units + bindparam("eps"),
        delta_spent_units=Dataset.delta_spent_units + bindparam("delta"),
    )
    .execution_options(synchronize_session=False)
)
#: A job's charges, oldest first (:meth:`LedgerRepository.charges_for_job`).
_JOB_CHARGES = (
    select(LedgerCharge)
    .where(LedgerCharge.job_id == bindparam("job_id"))
    .order_by(LedgerCharge.created_at)
)


class LedgerRepository(Repository[LedgerCharge]):
    """Budget charges and the atomic debit/credit of a dataset's spent amounts."""

    model = LedgerCharge

    def debit(self, dataset_id: str, epsilon_units: int, delta_units: int) -> bool:
        """Add a cost to a live dataset's spent amounts if it fits under both caps.

        One conditional UPDATE: atomic on PostgreSQL (row lock, WHERE re-evaluated) and on
        SQLite (one writer). False when nothing matched (unknown, deleted or short).
        """
        result = self.session.execute(
            _DEBIT, {"dataset_id": dataset_id, "eps": epsilon_units, "delta": delta_units}
        )
        return rowcount(result) == 1

    def credit(self, dataset_id: str, epsilon_units: int, delta_units: int) -> None:
        """Give back a refunded charge's amounts (the CHECK keeps spent >= 0)."""
        self.session.execute(
            update(Dataset)
            .where(Dataset.id == dataset_id)
            .values(
                epsilon_spent_units=Dataset.epsilon_spent_units - epsilon_units,
                delta_spent_units=Dataset.delta_spent_units - delta_units,
            )
            .execution_options(synchronize_session=False)
        )

    def find_by_key(self, dataset_id: str, idempotency_key: str) -> LedgerCharge | None:
        """The charge made on this dataset with this idempotency key, if any."""
        query = select(LedgerCharge).where(
            LedgerCharge.dataset_id == dataset_id,
            LedgerCharge.idempotency_key == idempotency_key,
        )
        return self.session.scalars(query).one_or_none()

    def job_state(self, job_id: str) -> tuple[str, datetime | None] | None:
        """(status, started_at) of a job, read fresh; None for an unknown job."""
        row = self.session.execute(
            select(Job.status, Job.started_at).where(Job.id == job_id)
        ).one_or_none()
        return None if row is None else (row[0], row[1])

    def charges_for_job(self, job_id: str, *, state: str | None = None) -> Sequence[LedgerCharge]:
        """A job's charges, optionally in one state."""
        if state is None:
            return self.session.scalars(_JOB_CHARGES, {"job_id": job_id}).all()
        query = select(LedgerCharge).where(
            LedgerCharge.job_id == job_id, LedgerCharge.state == state
        )
        return self.session.scalars(query.order_by(LedgerCharge.created_at)).all()

    def charges_for_dataset(self, dataset_id: str) -> Sequence[LedgerCharge]:
        """A dataset's charges, oldest first."""
        query = (
            select(LedgerCharge)
            .where(LedgerCharge.dataset_id == dataset_id)
            .order_by(LedgerCharge.created_at, LedgerCharge.id)
        )
        return self.session.scalars(query).all()

    def mark_refunded(self, charge_id: str, *, at: datetime) -> bool:
        """``charged`` → ``refunded``; False when it was not charged (a racing refund)."""
        result = self.session.execute(
            update(LedgerCharge)
            .where(LedgerCharge.id == charge_id, LedgerCharge.state == "charged")
            .values(state="refunded", refunded_at=at)
            .execution_options(synchronize_session=False)
        )
        return rowcount(result) == 1
