"""One contract for every job that spends privacy budget (docs/design.md §2 "Ledger semantics").

A fit, a charged aggregation (``transfer``, ``feature``) and a federated fit differ only in
what they check, how they calibrate and which datasets they charge. Everything else is written
once, here, in :func:`submit_charged_job`:

1. ``draft(uow)``, in a read transaction: who may ask (404/403) and what the job is — its kind,
   its dataset and its stored ``params``;
2. with an ``Idempotency-Key``: the caller's job with that key is returned as it stands
   (charged once, even once a dataset is gone) when it is the same request, and a key reused
   for a different request is a 422;
3. ``draft.price()``: everything public is validated and calibrated; a 422 here spends nothing;
   so is a job whose estimated work (``Pricing.work``, :mod:`service.dp.analysis.work`) exceeds the
   runner's cap (``PRIVFIT_MAX_JOB_WORK``: 422 ``job-too-large``);
4. one transaction: the ``queued`` job, its audit event, one charge per dataset (one
   conditional UPDATE each, in dataset-id order, all or none: a shortfall is a 409 and nothing
   is written), the study contributions it uses marked used; commit. Every charge is committed
   before any noise can be drawn;
5. two requests with the same key racing each other insert the same (site, key) pair: the
   database's unique constraint lets exactly one commit and the other returns the winner's job;
6. the job id goes to the runner (to a thread of the API process for a job whose draft says
   it needs one, :class:`~service.domain.jobs.lifecycle.ApiProcessScheduler`; a runner that
   cannot run it there is refused at step 3, a 422 that spends nothing). If that fails the
   job stays queued and the next start's recovery submits it again. A runner whose queue
   lives in the same database (the distributed queue,
   :class:`~service.domain.jobs.lifecycle.TransactionalScheduler`) enqueues inside the
   transaction of step 4 instead: charged and queued commit together.

Every caller gets the same answer, :class:`SubmittedJob`: the job with its charges as
committed (no second read) and whether this request created it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.db.base import utcnow
from service.db.errors import IntegrityConflictError
from service.db.models import Job, new_id
from service.db.uow import UnitOfWork
from service.domain import audit
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.errors import BudgetExhaustedError, ConflictError, InvalidInputError
from service.domain.ids import check_idempotency_key
from service.domain.jobs.lifecycle import (
    ApiProcessScheduler,
    JobCharge,
    JobScheduler,
    JobView,
    TransactionalScheduler,
    job_view,
    max_job_work,
    runs_jobs_in_the_api_process,
)
from service.domain.ledger import budgets
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, from_units, to_units
from service.domain.records.base import json_safe
from service.dp import Calibration

__all__ = [
    "DatasetCharge",
    "ForeignBudgetExhaustedError",
    "JobDraft",
    "JobTooLargeError",
    "Pricing",
    "SubmittedJob",
    "replayed_job",
    "submit_charged_job",
]

logger = logging.getLogger(__name__)


class ForeignBudgetExhaustedError(BudgetExhaustedError):
    """Another site's dataset cannot pay its share (409 ``…/budget-exhausted``): names the
    dataset and the request, not what the other site has left."""

    slug = "budget-exhausted"

    def __init__(
        self,
        detail: str,
        *,
        dataset_id: str,
        requested_epsilon: float | None,
        requested_delta: float | None,
    ) -> None:
        super().__init__(
            detail,
            remaining_epsilon=math.nan,
            remaining_delta=math.nan,
            requested_epsilon=requested_epsilon,
            requested_delta=requested_delta,
        )
        self.dataset_id = dataset_id

    def extensions(self) -> dict[str, Any]:
        members = {k: v for k, v in super().extensions().items() if not k.startswith("remaining")}
        return {**members, "dataset_id": self.dataset_id, "limit": "dataset"}


class JobTooLargeError(InvalidInputError):
    """The job's estimated work exceeds what this service runs in one job (422
    ``…/job-too-large``); nothing was charged. Names the cap, and the estimate when it is the
    caller's own business (a job over the caller's own dataset)."""

    slug = "job-too-large"
    title = "Job too large"

    def __init__(self, *, work: float | None, max_work: float) -> None:
        super().__init__(
            "this job's estimated work"
            + ("" if work is None else f" ({work:.3g} row-feature passes)")
            + f" exceeds this service's limit of {max_work:.3g} row-feature passes per job "
            "(PRIVFIT_MAX_JOB_WORK); ask for fewer epochs, rounds or candidates, a larger "
            "batch, or fewer rows. Nothing was charged.",
            errors=[{"loc": ["body"], "msg": "the job's estimated work exceeds the limit"}],
        )
        self.work = work
        self.max_work = max_work

    def extensions(self) -> dict[str, Any]:
        members: dict[str, Any] = {**super().extensions(), "max_work": self.max_work}
        if self.work is not None:
            members["work"] = self.work
        return members


@dataclass(frozen=True, slots=True)
class DatasetCharge:
    """(ε, δ) to charge one dataset for the job (within ``grant_id``'s cap when the dataset
    takes part through a study grant)."""

    dataset_id: str
    owner_site_id: str
    epsilon: float
    delta: float
    grant_id: str | None = None


@dataclass(frozen=True, slots=True)
class Pricing:
    """What a validated, calibrated job charges, and what its audit event says."""

    #: The ledger's label of the charges (the mechanism, method or protocol).
    mechanism: str
    charges: Sequence[DatasetCharge]
    audit_action: str
    audit_details: Mapping[str, Any]
    #: The audit event's subject: the job itself when None, else this one (e.g. a study),
    #: and then the event's details name the job.
    audit_subject: tuple[str, str] | None = None
    #: Study contributions (models or dataset grants) the job uses: marked used with the
    #: charge, so they can no longer be withdrawn.
    used_contributions: Sequence[str] = ()
    #: The calibration that set the cost, for a dry run's quote (single-dataset jobs).
    calibration: Calibration | None = None
    #: The job's estimated work in row-feature passes (:mod:`service.dp.analysis.work`), held to the
    #: runner's cap before anything is charged.
    work: float = 0.0
    #: Whether the estimate may be shown to the caller (False when it is computed from
    #: another site's row counts, e.g. a federated fit's).
    work_is_public: bool = True


@dataclass(frozen=True, slots=True)
class JobDraft:
    """A job as requested, before it is priced: its identity (what an ``Idempotency-Key``
    retry must repeat) and the function that validates and calibrates it."""

    kind: str
    dataset_id: str | None
    params: Mapping[str, Any]
    price: Callable[[], Pricing]
    #: The job must run on a thread of the API process (it uses that process's memory, e.g.
    #: the site nodes' task exchange), not wherever the runner runs its other jobs.
    needs_api_process: bool = False
    #: The typed plan fixed at submission, in its JSON form (:func:`service.dp.core.plan.
    #: plan_to_json`), stored on the job: the worker runs it (re-deriving it only as a check).
    plan: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class SubmittedJob:
    """A charged job as committed, with its charges; ``created`` is False for an idempotent
    retry (the job of the first request, as it now stands)."""

    view: JobView
    created: bool

    @property
    def job(self) -> Job:
        return self.view.job


def replayed_job(
    uow: UnitOfWork,
    *,
    owner: str,
    key: str,
    kind: str,
    dataset_id: str | None,
    params: Mapping[str, Any],
) -> Job | None:
    """Inside ``with uow:``: the site's job created with ``key`` when it is the same request
    (kind, dataset and params), None when the key is new; a key reused for a different request
    is a 422."""
    job = uow.jobs.get_by_idempotency_key(owner_site_id=owner, idempotency_key=key)
    if job is not None and not (
        job.kind == kind
        and job.dataset_id == dataset_id
        and dict(job.params) == json_safe(dict(params))
    ):
        raise InvalidInputError(
            "this Idempotency-Key was already used for a different request",
            errors=[{"loc": ["header", "Idempotency-Key"], "msg": "key reused"}],
        )
    return job


def _existing(uow: UnitOfWork, owner: str, key: str, draft: JobDraft) -> Job | None:
    return replayed_job(
        uow,
        owner=owner,
        key=key,
        kind=draft.kind,
        dataset_id=draft.dataset_id,
        params=draft.params,
    )


def _as_charged(pricing: Pricing) -> tuple[JobCharge, ...]:
    """The job's charges as the ledger now holds them (amounts rounded up to ledger units, in
    the order they were charged), without reading them back."""
    return tuple(
        JobCharge(
            dataset_id=c.dataset_id,
            epsilon=from_units(to_units(c.epsilon, EPSILON_UNIT, "up"), EPSILON_UNIT),
            delta=from_units(to_units(c.delta, DELTA_UNIT, "up"), DELTA_UNIT),
            state="charged",
        )
        for c in sorted(pricing.charges, key=lambda c: c.dataset_id)
    )


def _charge_all(uow: UnitOfWork, actor: Principal, job_id: str, pricing: Pricing) -> list[str]:
    """:func:`budgets.charge_many`, with another site's remaining budget left out of a 409."""
    try:
        return budgets.charge_many(
            uow,
            [
                budgets.ChargeRequest(
                    dataset_id=c.dataset_id,
                    epsilon=c.epsilon,
                    delta=c.delta,
                    mechanism=pricing.mechanism,
                    job_id=job_id,
                    grant_id=c.grant_id,
                )
                for c in pricing.charges
            ],
        )
    except budgets.DatasetBudgetExhaustedError as exc:
        owners = {c.dataset_id: c.owner_site_id for c in pricing.charges}
        if exc.limit != "dataset" or owners.get(exc.dataset_id) == actor.site_id:
            raise
        raise ForeignBudgetExhaustedError(
            f"the privacy budget of dataset {exc.dataset_id} (another site's) cannot cover "
            f"its cost in this job: requested ε={exc.requested_epsilon!r}, "
            f"δ={exc.requested_delta!r}. Nothing was charged to any dataset.",
            dataset_id=exc.dataset_id,
            requested_epsilon=exc.requested_epsilon,
            requested_delta=exc.requested_delta,
        ) from None


def _check_work(pricing: Pricing, runner: JobScheduler) -> None:
    """A job estimated to need more than the runner's cap is a 422, before any charge."""
    cap = max_job_work(runner)
    if cap is not None and pricing.work > cap:
        raise JobTooLargeError(work=pricing.work if pricing.work_is_public else None, max_work=cap)


def submit_charged_job(
    uow: UnitOfWork,
    *,
    actor: Principal,
    draft: Callable[[UnitOfWork], JobDraft],
    runner: JobScheduler,
    idempotency_key: str | None = None,
    context: AuditContext | None = None,
) -> SubmittedJob:
    """Check, charge every dataset (all or none), commit and enqueue a job (module docstring).

    ``draft`` runs inside an open read transaction of ``uow``; its ``price`` right after it,
    only for a new job. Raises what they raise (nothing is written then), a 409 for a
    shortfall (nothing charged), and ``ConflictError`` when a racing request with the same key
    has not committed yet."""
    check_idempotency_key(idempotency_key)
    with uow:
        # The draft finds the caller's own dataset, model or study: for the admin, which owns
        # none, that is the same 404 as for an id that names nothing (never a 403).
        drafted = draft(uow)
        owner = actor.require_site()
        if idempotency_key is not None:
            found = _existing(uow, owner, idempotency_key, drafted)
            if found is not None:
                return SubmittedJob(view=job_view(uow, found), created=False)
        if drafted.needs_api_process and not runs_jobs_in_the_api_process(runner):
            # The use case says why in its own draft; this is the contract's last word.
            raise InvalidInputError(
                "this job must run in the API process, and this service's job runner runs "
                "jobs elsewhere; nothing was charged"
            )
        pricing = drafted.price()
        _check_work(pricing, runner)
    job_id = new_id()
    try:
        with uow:
            # The job and its audit event go to the database in the charges' flush.
            job = uow.jobs.stage(
                Job(
                    id=job_id,
                    owner_site_id=owner,
                    kind=drafted.kind,
                    dataset_id=drafted.dataset_id,
                    params=json_safe(dict(drafted.params)),
                    status="queued",
                    idempotency_key=idempotency_key,
                    plan=drafted.plan,
                )
            )
            if context is not None:
                subject_type, subject_id = pricing.audit_subject or ("job", job_id)
                audit.record(
                    uow,
                    action=pricing.audit_action,
                    actor=actor,
                    context=context,
                    subject_type=subject_type,
                    subject_id=subject_id,
                    details=(
                        dict(pricing.audit_details)
                        if pricing.audit_subject is None
                        else {"job_id": job_id, **pricing.audit_details}
                    ),
                )
            with uow.no_autoflush():
                _charge_all(uow, actor, job_id, pricing)
            used = list(pricing.used_contributions)
            if used and uow.studies.mark_used(used, at=utcnow()) != len(used):
                raise ConflictError("a contribution was withdrawn while the job was prepared")
            view = JobView(job, _as_charged(pricing))  # the answer: no query
            if isinstance(runner, TransactionalScheduler):
                # A queue in this database: the queue row commits with the charge.
                runner.enqueue_in_transaction(uow, job_id)
            uow.commit()
    except (IntegrityConflictError, budgets.DuplicateChargeError):
        if idempotency_key is None:
            raise
        # A concurrent request with the same key committed first: return its job.
        with uow:
            found = _existing(uow, owner, idempotency_key, drafted)
            if found is None:
                raise ConflictError(
                    "a request with this Idempotency-Key is being processed; retry"
                ) from None
            return SubmittedJob(view=job_view(uow, found), created=False)
    try:
        if drafted.needs_api_process and isinstance(runner, ApiProcessScheduler):
            runner.submit_to_api_process(job_id)
        else:
            runner.submit(job_id)
    except Exception:
        logger.exception("job %s stays queued: the runner did not accept it", job_id)
    return SubmittedJob(view=view, created=True)
