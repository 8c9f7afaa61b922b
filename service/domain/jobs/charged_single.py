"""Queue a job together with its ledger charge on one dataset, for private evaluations and
privately tuned fits (these two still use this path instead of
:func:`service.domain.jobs.charged.submit_charged_job`; moving them over is the next step of
the one charged-job contract).

One transaction inserts the queued job, its audit event and the (ε, δ) charge on one dataset;
an exhausted budget is a 409 and nothing is written. ``Idempotency-Key``: a retry with the same
key and the same request returns the first job, charged once; the same key for a different
request is a 422.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from service.db.errors import IntegrityConflictError
from service.db.models import Job, new_id
from service.db.uow import UnitOfWork
from service.domain import audit
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.errors import ConflictError, InvalidInputError
from service.domain.jobs.lifecycle import JobScheduler, JobView, job_charge, job_view
from service.domain.ledger import budgets

__all__ = ["ChargedJob", "SubmittedJob", "existing_job", "submit_charged_job"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChargedJob:
    """A job to queue and what it charges."""

    kind: str
    dataset_id: str
    params: dict[str, Any]
    epsilon: float
    delta: float
    mechanism: str
    audit_action: str
    audit_details: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SubmittedJob:
    """The committed job with its charges; ``created`` is False for an idempotent retry."""

    view: JobView
    created: bool


def existing_job(
    uow: UnitOfWork, *, owner: str, key: str, kind: str, params: dict[str, Any]
) -> Job | None:
    """The job an earlier request with ``key`` created (422 if it was a different request)."""
    job = uow.jobs.get_by_idempotency_key(owner_site_id=owner, idempotency_key=key)
    if job is not None and (job.kind != kind or dict(job.params) != params):
        raise InvalidInputError(
            "this Idempotency-Key was already used for a different request",
            errors=[{"loc": ["header", "Idempotency-Key"], "msg": "key reused"}],
        )
    return job


def submit_charged_job(
    uow: UnitOfWork,
    *,
    job: ChargedJob,
    owner: str,
    actor: Principal,
    runner: JobScheduler,
    idempotency_key: str | None,
    context: AuditContext | None,
) -> SubmittedJob:
    """Insert the job and charge its dataset in one transaction, commit, hand it to the
    runner (a runner that refuses leaves it queued for the next start's recovery)."""
    job_id = new_id()
    try:
        with uow:
            row = uow.jobs.stage(
                Job(
                    id=job_id,
                    owner_site_id=owner,
                    kind=job.kind,
                    dataset_id=job.dataset_id,
                    params=job.params,
                    status="queued",
                    idempotency_key=idempotency_key,
                )
            )
            if context is not None:
                audit.record(
                    uow,
                    action=job.audit_action,
                    actor=actor,
                    context=context,
                    subject_type="job",
                    subject_id=job_id,
                    details=job.audit_details,
                )
            with uow.no_autoflush():
                charge = budgets.charge(
                    uow,
                    dataset_id=job.dataset_id,
                    epsilon=job.epsilon,
                    delta=job.delta,
                    mechanism=job.mechanism,
                    job_id=job_id,
                    idempotency_key=idempotency_key,
                )
            view = JobView(row, (job_charge(charge),))
            uow.commit()
    except (IntegrityConflictError, budgets.DuplicateChargeError):
        if idempotency_key is None:
            raise
        with uow:
            found = existing_job(
                uow, owner=owner, key=idempotency_key, kind=job.kind, params=job.params
            )
            if found is None:
                raise ConflictError(
                    "a request with this Idempotency-Key is being processed; retry"
                ) from None
            return SubmittedJob(view=job_view(uow, found), created=False)
    try:
        runner.submit(job_id)
    except Exception:
        logger.exception("job %s stays queued: the runner did not accept it", job_id)
    return SubmittedJob(view=view, created=True)
