"""Reading and cancelling jobs (the API side): a site sees only its own jobs (any other is
404); cancelling a queued job refunds its charge in the same transaction, a running one only
requests the cancel (never refunded)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.db.base import utcnow
from service.db.job_stats import JobStatistics
from service.db.models import Job, LedgerCharge
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.errors import ConflictError, NotFoundError
from service.domain.ids import looks_like_id
from service.domain.ledger import budgets
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, from_units


@dataclass(frozen=True, slots=True)
class JobCharge:
    """What a job charged to one dataset's budget."""

    dataset_id: str
    epsilon: float
    delta: float
    state: str


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as its owner sees it: the row and its ledger charges."""

    job: Job
    charges: tuple[JobCharge, ...]


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of jobs."""

    items: Sequence[JobView]
    total: int


def job_charge(row: LedgerCharge) -> JobCharge:
    """What a ledger row says about a job's charge."""
    return JobCharge(
        dataset_id=row.dataset_id,
        epsilon=from_units(row.epsilon_units, EPSILON_UNIT),
        delta=from_units(row.delta_units, DELTA_UNIT),
        state=row.state,
    )


def job_view(uow: UnitOfWork, job: Job) -> JobView:
    """``job`` with its ledger charges, read in the caller's open transaction."""
    return JobView(
        job=job, charges=tuple(job_charge(c) for c in uow.ledger.charges_for_job(job.id))
    )


def _visible(job: Job | None, actor: Principal) -> Job:
    if job is None or not actor.owns(job.owner_site_id):
        raise NotFoundError("job")
    return job


def get_job(uow: UnitOfWork, *, job_id: str, actor: Principal) -> JobView:
    """A job of the caller's site; any other job is 404 (for the admin, every job)."""
    if not looks_like_id(job_id):
        raise NotFoundError("job")
    with uow:
        return job_view(uow, _visible(uow.jobs.get(job_id), actor))


def list_jobs(uow: UnitOfWork, *, actor: Principal, limit: int, offset: int) -> JobPage:
    """The caller's jobs, newest first (403 for the admin, which owns none)."""
    owner = actor.require_site()
    with uow:
        return JobPage(
            items=[
                job_view(uow, job)
                for job in uow.jobs.list_page(owner_site_id=owner, limit=limit, offset=offset)
            ],
            total=uow.jobs.count(owner_site_id=owner),
        )


def cancel_job(uow: UnitOfWork, *, job_id: str, actor: Principal) -> JobView:
    """Cancel a job.

    Queued: cancelled now and its charge refunded, in one transaction. Running: a cancel is
    requested; the worker stops at its next progress report and the job ends ``cancelled``
    without a refund. Finished: :class:`ConflictError`. Returns the job as it now stands.
    """
    if not looks_like_id(job_id):
        raise NotFoundError("job")
    with uow:
        job = _visible(uow.jobs.get(job_id), actor)
        now = utcnow()
        if uow.jobs.transition(job_id, expected="queued", status="cancelled", finished_at=now):
            budgets.refund(uow, job_id=job_id)
            uow.commit()
        elif uow.jobs.request_cancel(job_id):
            uow.commit()
        else:
            # Neither queued nor running any more (possibly a moment ago): finished.
            uow.rollback()
            job = _visible(uow.jobs.get(job_id, fresh=True), actor)
            raise ConflictError(f"the job has already finished ({job.status}); nothing to cancel")
        return job_view(uow, _visible(uow.jobs.get(job_id, fresh=True), actor))


def read_job_statistics(uow_factory: UnitOfWorkFactory, bounds: Sequence[float]) -> JobStatistics:
    """Deployment-wide job figures for operations (no dataset or site is named in them)."""
    with uow_factory() as uow:
        return uow.job_statistics(bounds)
