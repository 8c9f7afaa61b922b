"""The unit of work: one database transaction, with the repositories that run inside it.

Usage (a domain function owns the transaction boundary)::

    def rename_site(uow: UnitOfWork, *, site_id: str, name: str) -> Site:
        with uow:
            site = uow.sites.get(site_id)
            ...
            uow.commit()
            return site

Nothing is persisted without an explicit :meth:`UnitOfWork.commit`; leaving the ``with`` block
rolls back whatever was not committed (also after an exception). Objects loaded inside stay
readable afterwards (detached, attributes loaded; relationships are ``lazy="raise"``).

A ``UnitOfWork`` can be entered again after it is left: each ``with`` is a fresh session and
transaction, which is how a use case runs two transactions (for example: charge the budget and
commit, then compute).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Self

from sqlalchemy.orm import Session, sessionmaker

from service.db.errors import translate_integrity_errors
from service.db.job_stats import JobStatistics, job_statistics
from service.db.repositories import (
    ApiKeyRepository,
    AuditRepository,
    DatasetRepository,
    EvaluationRepository,
    JobRepository,
    LedgerRepository,
    ModelRepository,
    OfferRepository,
    RemoteContributionRepository,
    SiteRepository,
    StudyRepository,
)

__all__ = ["UnitOfWork", "UnitOfWorkFactory"]


class UnitOfWork:
    """A transaction scope over a session from ``session_factory``."""

    sites: SiteRepository
    api_keys: ApiKeyRepository
    audit: AuditRepository
    datasets: DatasetRepository
    ledger: LedgerRepository
    jobs: JobRepository
    models: ModelRepository
    studies: StudyRepository
    evaluations: EvaluationRepository
    remote_contributions: RemoteContributionRepository
    offers: OfferRepository

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self._session_factory = session_factory
        self._session: Session | None = None

    @property
    def session(self) -> Session:
        """The open session; only inside ``with uow:``."""
        if self._session is None:
            raise RuntimeError("the unit of work is not active; use it as `with uow:`")
        return self._session

    def __enter__(self) -> Self:
        if self._session is not None:
            raise RuntimeError("the unit of work is already active")
        self._session = self._session_factory()
        self.sites = SiteRepository(self._session)
        self.api_keys = ApiKeyRepository(self._session)
        self.audit = AuditRepository(self._session)
        self.datasets = DatasetRepository(self._session)
        self.ledger = LedgerRepository(self._session)
        self.jobs = JobRepository(self._session)
        self.models = ModelRepository(self._session)
        self.studies = StudyRepository(self._session)
        self.evaluations = EvaluationRepository(self._session)
        self.remote_contributions = RemoteContributionRepository(self._session)
        self.offers = OfferRepository(self._session)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # close() rolls back the open transaction (anything not committed is discarded) and
        # detaches loaded objects *without* expiring them, so results stay readable.
        session = self.session
        self._session = None
        session.close()

    def commit(self) -> None:
        """Commit everything done so far; the unit of work stays open for more.

        Raises :class:`service.db.errors.IntegrityConflictError` when a constraint fails.
        """
        with translate_integrity_errors():
            self.session.commit()

    def rollback(self) -> None:
        """Discard everything not yet committed."""
        self.session.rollback()

    def no_autoflush(self) -> AbstractContextManager[Session]:
        """A block in which queries do not flush staged rows first (they are flushed together
        later); for statements that do not read those rows."""
        return self.session.no_autoflush

    def job_statistics(self, bounds: Sequence[float]) -> JobStatistics:
        """Aggregate job and ledger figures (:mod:`service.db.job_stats`)."""
        return job_statistics(self.session, bounds)

    def flush(self) -> None:
        """Send pending changes to the database without committing (fills in ids)."""
        with translate_integrity_errors():
            self.session.flush()


#: Builds a fresh unit of work; the API and the job runners hold one of these.
UnitOfWorkFactory = Callable[[], UnitOfWork]
