"""Repositories: the only place that builds SQL.

Each repository wraps the unit of work's session. Repositories never commit; they ``flush``
when the caller needs generated values. Add a repository per aggregate and expose it on
:class:`service.db.uow.UnitOfWork`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.orm import Session

from service.db.base import Base
from service.db.errors import translate_integrity_errors
from service.db.models import (
    ApiKey,
    AuditEvent,
    Dataset,
    DatasetChunk,
    DatasetOffer,
    Evaluation,
    Job,
    LedgerCharge,
    Model,
    NodeJob,
    RemoteContribution,
    Site,
    Study,
    StudyContribution,
    StudyMember,
)

__all__ = [
    "ApiKeyRepository",
    "AuditRepository",
    "DatasetRepository",
    "EvaluationRepository",
    "JobRepository",
    "LedgerRepository",
    "ModelRepository",
    "Repository",
    "SiteRepository",
    "StudyRepository",
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

    def get_fresh(self, id_: Any) -> ModelT | None:
        """Like :meth:`get`, but re-read from the database even if the session holds it."""
        return self.session.get(self.model, id_, populate_existing=True)

    def add(self, obj: ModelT) -> ModelT:
        """Stage ``obj`` for insertion and flush, so defaults and ids are filled in."""
        self.session.add(obj)
        with translate_integrity_errors():
            self.session.flush()
        return obj

    def stage(self, obj: ModelT) -> ModelT:
        """Stage ``obj`` for insertion with the unit of work's next flush (its commit at the
        latest), together with the other rows of the transaction: one round of the ORM's
        flush instead of one per row. Its defaults are filled in by that flush."""
        self.session.add(obj)
        return obj


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
        return _rowcount(result) == 1

    def deactivate(self, site_id: str, *, at: datetime) -> bool:
        """Mark an active site deactivated; False when it already was (or a racing call won)."""
        result = self.session.execute(
            update(Site)
            .where(Site.id == site_id, Site.deactivated_at.is_(None))
            .values(deactivated_at=at)
            .execution_options(synchronize_session="fetch")
        )
        return _rowcount(result) == 1

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


def _rowcount(result: Any) -> int:
    return int(getattr(result, "rowcount", 0))


class DatasetRepository(Repository[Dataset]):
    """Datasets and their content chunks."""

    model = Dataset

    def add_chunk(self, dataset_id: str, *, seq: int, n_rows: int, payload: bytes) -> None:
        """Store one block of encoded content (flushed now, so memory stays flat)."""
        chunk = DatasetChunk(dataset_id=dataset_id, seq=seq, n_rows=n_rows, payload=payload)
        self.session.add(chunk)
        with translate_integrity_errors():
            self.session.flush()
        self.session.expunge(chunk)  # the session must not keep every block in memory

    def chunk_payloads(self, dataset_id: str) -> Iterator[bytes]:
        """The content blocks in order, streamed one at a time."""
        query = (
            select(DatasetChunk.payload)
            .where(DatasetChunk.dataset_id == dataset_id)
            .order_by(DatasetChunk.seq)
            .execution_options(yield_per=1)
        )
        yield from self.session.scalars(query)

    def delete_chunks(self, dataset_id: str) -> int:
        """Remove a dataset's content; returns how many blocks were removed."""
        result = self.session.execute(
            delete(DatasetChunk).where(DatasetChunk.dataset_id == dataset_id)
        )
        return _rowcount(result)

    def _owned(self, query: Any, owner_site_id: str | None, include_deleted: bool) -> Any:
        if owner_site_id is not None:
            query = query.where(Dataset.owner_site_id == owner_site_id)
        if not include_deleted:
            query = query.where(Dataset.deleted_at.is_(None))
        return query

    def list_page(
        self, *, owner_site_id: str | None, include_deleted: bool, limit: int, offset: int
    ) -> Sequence[Dataset]:
        """Datasets newest first, of one site (or all with ``owner_site_id=None``)."""
        query = self._owned(select(Dataset), owner_site_id, include_deleted)
        query = query.order_by(Dataset.created_at.desc(), Dataset.id).limit(limit).offset(offset)
        return self.session.scalars(query).all()

    def count(self, *, owner_site_id: str | None, include_deleted: bool) -> int:
        """How many datasets :meth:`list_page` pages through."""
        query = self._owned(
            select(func.count()).select_from(Dataset), owner_site_id, include_deleted
        )
        return int(self.session.scalar(query) or 0)


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
        return _rowcount(result) == 1

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
        return _rowcount(result) == 1


class JobRepository(Repository[Job]):
    """Jobs. Every status change is one conditional UPDATE on the expected current status."""

    model = Job

    def get(self, id_: Any, *, fresh: bool = False) -> Job | None:
        """A job; ``fresh`` re-reads it after a conditional UPDATE changed it."""
        return self.get_fresh(id_) if fresh else super().get(id_)

    def get_by_idempotency_key(self, *, owner_site_id: str, idempotency_key: str) -> Job | None:
        """The site's job created with this idempotency key, if any."""
        query = select(Job).where(
            Job.owner_site_id == owner_site_id, Job.idempotency_key == idempotency_key
        )
        return self.session.scalars(query).one_or_none()

    def ids_with_status(self, status: str) -> Sequence[str]:
        """Ids of every job in ``status``, oldest first."""
        query = select(Job.id).where(Job.status == status).order_by(Job.created_at, Job.id)
        return self.session.scalars(query).all()

    def list_page(self, *, owner_site_id: str | None, limit: int, offset: int) -> Sequence[Job]:
        """Jobs newest first, of one site (or all)."""
        query = select(Job)
        if owner_site_id is not None:
            query = query.where(Job.owner_site_id == owner_site_id)
        query = query.order_by(Job.created_at.desc(), Job.id).limit(limit).offset(offset)
        return self.session.scalars(query).all()

    def count(self, *, owner_site_id: str | None) -> int:
        """How many jobs :meth:`list_page` pages through."""
        query = select(func.count()).select_from(Job)
        if owner_site_id is not None:
            query = query.where(Job.owner_site_id == owner_site_id)
        return int(self.session.scalar(query) or 0)

    def _update(self, job_id: str, *conditions: Any, **values: Any) -> bool:
        result = self.session.execute(
            update(Job)
            .where(Job.id == job_id, *conditions)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        return _rowcount(result) == 1

    def transition(
        self,
        job_id: str,
        *,
        expected: str,
        status: str,
        finished_at: datetime | None = None,
        error: dict[str, Any] | None = None,
    ) -> bool:
        """``expected`` → ``status``; False when the job was not in ``expected``."""
        values: dict[str, Any] = {"status": status}
        if finished_at is not None:
            values["finished_at"] = finished_at
        if error is not None:
            values["error"] = error
        return self._update(job_id, Job.status == expected, **values)

    def claim(self, job_id: str, *, started_at: datetime) -> Job | None:
        """``queued`` → ``running`` for exactly one worker, counting the attempt; the claimed
        job as it now is (one ``UPDATE … RETURNING``), or None when it was not queued."""
        values = {"job_id": job_id, "started_at": started_at}
        return self.session.scalars(_CLAIM, values).one_or_none()

    def request_cancel(self, job_id: str) -> bool:
        """Flag a running job for cancellation; False when it is not running."""
        return self._update(job_id, Job.status == "running", cancel_requested=True)

    def report_progress(self, job_id: str, fraction: float | None) -> bool:
        """Record progress of a running job (None: only read); True when a cancel was
        requested (or the job is no longer running) and the worker should stop."""
        if fraction is not None:
            self._update(job_id, Job.status == "running", progress=fraction)
        row = self.session.execute(
            select(Job.status, Job.cancel_requested).where(Job.id == job_id)
        ).one_or_none()
        return row is None or row[0] != "running" or bool(row[1])

    def succeed(self, job_id: str, *, model_id: str | None, finished_at: datetime) -> Job | None:
        """``running`` → ``succeeded`` unless a cancel was requested meanwhile; the job as it
        now is (one ``UPDATE … RETURNING``), or None when it was not changed."""
        values = {"job_id": job_id, "model_id": model_id, "finished_at": finished_at}
        return self.session.scalars(_SUCCEED, values).one_or_none()


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
        return _rowcount(result) == 1

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
        return _rowcount(result)

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
        return _rowcount(result) == 1

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
#: queued → running (:meth:`JobRepository.claim`).
_CLAIM = (
    update(Job)
    .where(Job.id == bindparam("job_id"), Job.status == "queued")
    .values(status="running", started_at=bindparam("started_at"), attempt=Job.attempt + 1)
    .returning(Job)
    .execution_options(synchronize_session=False, populate_existing=True)
)
#: running → succeeded unless a cancel was requested (:meth:`JobRepository.succeed`).
_SUCCEED = (
    update(Job)
    .where(Job.id == bindparam("job_id"), Job.status == "running", Job.cancel_requested.is_(False))
    .values(
        status="succeeded",
        progress=1.0,
        model_id=bindparam("model_id"),
        finished_at=bindparam("finished_at"),
    )
    .returning(Job)
    .execution_options(synchronize_session=False, populate_existing=True)
)


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
        return _rowcount(result) == 1


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
        return _rowcount(result) == 1

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
        return _rowcount(result) == 1

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
        return _rowcount(result) == 1
