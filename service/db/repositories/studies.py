"""StudyRepository: studies, their members and their contributions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, update

from service.db.errors import translate_integrity_errors
from service.db.models import (
    Model,
    Site,
    Study,
    StudyContribution,
    StudyMember,
)
from service.db.repositories.base import Repository, rowcount


class StudyRepository(Repository[Study]):
    """Studies, their members and their contributions."""

    model = Study

    def add_member(self, study_id: str, site_id: str, *, role: str) -> None:
        """Stage a membership (flushed with the unit of work)."""
        self.session.add(StudyMember(study_id=study_id, site_id=site_id, role=role))

    def members(self, study_id: str) -> Sequence[StudyMember]:
        """A study's members, the coordinator first."""
        query = (
            select(StudyMember)
            .where(StudyMember.study_id == study_id)
            .order_by(StudyMember.role, StudyMember.created_at, StudyMember.site_id)
        )
        return self.session.scalars(query).all()

    def is_member(self, study_id: str, site_id: str) -> bool:
        """True when the site takes part in the study."""
        return self.session.get(StudyMember, (study_id, site_id)) is not None

    def existing_site_ids(self, site_ids: Sequence[str]) -> set[str]:
        """Which of these site ids exist."""
        if not site_ids:
            return set()
        query = select(Site.id).where(Site.id.in_(list(site_ids)))
        return set(self.session.scalars(query).all())

    def _of_member(self, query: Any, site_id: str | None) -> Any:
        if site_id is not None:
            members = select(StudyMember.study_id).where(StudyMember.site_id == site_id)
            query = query.where(Study.id.in_(members))
        return query

    def list_page(self, *, member_site_id: str | None, limit: int, offset: int) -> Sequence[Study]:
        """Studies newest first that a site belongs to (or all with ``None``)."""
        query = self._of_member(select(Study), member_site_id)
        query = query.order_by(Study.created_at.desc(), Study.id).limit(limit).offset(offset)
        return self.session.scalars(query).all()

    def count(self, *, member_site_id: str | None) -> int:
        """How many studies :meth:`list_page` pages through."""
        query = self._of_member(select(func.count()).select_from(Study), member_site_id)
        return int(self.session.scalar(query) or 0)

    def add_contribution(self, contribution: StudyContribution) -> StudyContribution:
        """Insert a contribution (a duplicate model or dataset raises a conflict)."""
        self.session.add(contribution)
        with translate_integrity_errors():
            self.session.flush()
        return contribution

    def contribution(self, study_id: str, contribution_id: str) -> StudyContribution | None:
        """One of the study's contributions, or None."""
        contribution = self.session.get(StudyContribution, contribution_id)
        if contribution is None or contribution.study_id != study_id:
            return None
        return contribution

    def contributions(self, study_id: str) -> Sequence[StudyContribution]:
        """A study's contributions, oldest first."""
        query = (
            select(StudyContribution)
            .where(StudyContribution.study_id == study_id)
            .order_by(StudyContribution.created_at, StudyContribution.id)
        )
        return self.session.scalars(query).all()

    def delete_unused_contribution(self, contribution_id: str) -> bool:
        """Remove a contribution no aggregation has used; False when it was used meanwhile."""
        result = self.session.execute(
            delete(StudyContribution)
            .where(StudyContribution.id == contribution_id, StudyContribution.used_at.is_(None))
            .execution_options(synchronize_session=False)
        )
        return rowcount(result) == 1

    def mark_used(self, contribution_ids: Sequence[str], *, at: datetime) -> int:
        """Record that an aggregation used these contributions (they can no longer be
        withdrawn; the first use's time is kept). Returns how many still exist: fewer than
        asked means one was withdrawn meanwhile."""
        if not contribution_ids:
            return 0
        result = self.session.execute(
            update(StudyContribution)
            .where(StudyContribution.id.in_(list(contribution_ids)))
            .values(used_at=func.coalesce(StudyContribution.used_at, at))
            .execution_options(synchronize_session=False)
        )
        return rowcount(result)

    def debit_grant(self, grant_id: str, epsilon_units: int, delta_units: int) -> bool:
        """Add a cost to a dataset grant's spent amounts if it fits under the grant's caps.

        One conditional UPDATE, like :meth:`LedgerRepository.debit`; False when the grant is
        unknown or short. The caller debits the dataset in the same transaction.
        """
        result = self.session.execute(
            update(StudyContribution)
            .where(
                StudyContribution.id == grant_id,
                StudyContribution.kind == "dataset",
                StudyContribution.epsilon_spent_units + epsilon_units
                <= StudyContribution.epsilon_cap_units,
                StudyContribution.delta_spent_units + delta_units
                <= StudyContribution.delta_cap_units,
            )
            .values(
                epsilon_spent_units=StudyContribution.epsilon_spent_units + epsilon_units,
                delta_spent_units=StudyContribution.delta_spent_units + delta_units,
            )
            .execution_options(synchronize_session=False)
        )
        return rowcount(result) == 1

    def credit_grant(self, grant_id: str, epsilon_units: int, delta_units: int) -> None:
        """Give back a refunded charge's amounts to its grant (the CHECK keeps spent >= 0)."""
        self.session.execute(
            update(StudyContribution)
            .where(StudyContribution.id == grant_id)
            .values(
                epsilon_spent_units=StudyContribution.epsilon_spent_units - epsilon_units,
                delta_spent_units=StudyContribution.delta_spent_units - delta_units,
            )
            .execution_options(synchronize_session=False)
        )

    def get_grant_fresh(self, grant_id: str) -> StudyContribution | None:
        """A grant re-read from the database (after a conditional UPDATE)."""
        contribution = self.session.get(StudyContribution, grant_id, populate_existing=True)
        return contribution if contribution is not None and contribution.kind == "dataset" else None

    def results(self, study_id: str) -> Sequence[Model]:
        """Models released to the study (aggregations), newest first."""
        query = (
            select(Model)
            .where(Model.study_id == study_id)
            .order_by(Model.created_at.desc(), Model.id)
        )
        return self.session.scalars(query).all()
