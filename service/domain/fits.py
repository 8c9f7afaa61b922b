"""Fit requests: validate, quote, charge and enqueue (issue 4 item 3, DESIGN §2 and §4).

Order of a fit (the budget charge is the one deliberate early commit of the domain):

1. validate everything public with :func:`service.dp.calibrate` on the dataset's public n and
   d: an unknown mechanism, a bad ε/δ/λ or parameter is a 422 before anything is spent;
2. one transaction: insert the job (``queued``) and charge the ledger with the calibration's
   (ε, δ) (one conditional UPDATE; an exhausted budget is a 409 and nothing is written);
   commit. The charge is committed before any noise can be drawn;
3. hand the job id to the runner. If that fails the job stays queued and is resubmitted by the
   next start's recovery.

A dry run stops after step 1 and returns the exact cost and the calibration.

``Idempotency-Key``: a retried request with the same key returns the job of the first one,
charged once. Two identical requests racing each other insert the same (site, key) pair; the
database's unique constraint lets exactly one commit and the other returns the winner's job.
Reusing a key for a different request is a 422.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from service.db.errors import IntegrityConflictError
from service.db.models import Dataset, Job, new_id
from service.db.uow import UnitOfWork
from service.domain import audit, budgets
from service.domain.audit import AuditContext
from service.domain.datasets import get_owned_dataset
from service.domain.errors import ConflictError, InvalidInputError
from service.domain.ids import MAX_IDEMPOTENCY_KEY_LENGTH, check_idempotency_key
from service.domain.jobs import JobScheduler, JobView, job_charge, job_view
from service.domain.principal import Principal
from service.domain.privacy_record import NO_DP_MECHANISMS, json_safe
from service.domain.ranges import check_calibration
from service.dp import MECHANISMS, Calibration, calibrate

__all__ = [
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "FitQuote",
    "FitRequest",
    "SubmittedFit",
    "quote_fit",
    "submit_fit",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FitRequest:
    """A fit as requested (already well-formed; the mechanism's rules are checked here)."""

    mechanism: str
    epsilon: float | None
    delta: float = 0.0
    loss: str = "logistic"
    regularization: float = 1e-3
    params: Mapping[str, Any] = field(default_factory=dict)

    def to_params(self) -> dict[str, Any]:
        """The JSON stored as the job's ``params``."""
        return {
            "mechanism": self.mechanism,
            "epsilon": None if self.epsilon is None else float(self.epsilon),
            "delta": float(self.delta),
            "loss": self.loss,
            "regularization": float(self.regularization),
            "params": json_safe(dict(self.params)),
        }


@dataclass(frozen=True, slots=True)
class FitQuote:
    """What a fit would spend and how it would randomise (a dry run): the cost charged to the
    ledger, the calibration, and the dataset's remaining budget."""

    mechanism: str
    epsilon: float
    delta: float
    private: bool
    expected_noise_norm: float | None
    composition: str
    calibration: dict[str, Any]
    remaining_epsilon: float
    remaining_delta: float

    @property
    def affordable(self) -> bool:
        return self.epsilon <= self.remaining_epsilon and self.delta <= self.remaining_delta


@dataclass(frozen=True, slots=True)
class SubmittedFit:
    """The job of a fit request with its charges, as committed; ``created`` is False for an
    idempotent retry."""

    view: JobView
    created: bool

    @property
    def job(self) -> Job:
        return self.view.job


def _calibrate(dataset: Dataset, request: FitRequest) -> Calibration:
    if request.mechanism not in MECHANISMS:
        raise InvalidInputError(
            f"unknown mechanism {request.mechanism!r}; choose one of "
            + ", ".join(sorted(MECHANISMS)),
            errors=[{"loc": ["body", "mechanism"], "msg": "unknown mechanism"}],
        )
    if request.mechanism in NO_DP_MECHANISMS and not dataset.allow_non_private:
        raise InvalidInputError(
            "this dataset does not allow non-private fits (it was uploaded without "
            "allow_non_private)",
            errors=[{"loc": ["body", "mechanism"], "msg": "non_private is not allowed here"}],
        )
    if request.epsilon is None and request.mechanism not in NO_DP_MECHANISMS:
        raise InvalidInputError(
            f"epsilon is required for {request.mechanism}",
            errors=[{"loc": ["body", "epsilon"], "msg": "required for a private mechanism"}],
        )
    try:
        calibration = calibrate(
            request.mechanism,
            n=dataset.n_rows,
            d=dataset.n_features,
            epsilon=math.inf if request.epsilon is None else request.epsilon,
            delta=request.delta,
            loss=request.loss,
            regularization=request.regularization,
            **dict(request.params),
        )
    except (ValueError, TypeError, ArithmeticError, MemoryError) as exc:
        raise InvalidInputError(
            f"invalid fit parameters: {exc}",
            errors=[{"loc": ["body"], "msg": str(exc)}],
        ) from exc
    if request.mechanism not in NO_DP_MECHANISMS:
        check_calibration(
            epsilon=calibration.epsilon,
            delta=calibration.delta,
            details=calibration.details,
            noise_norm=calibration.expected_noise_norm,
        )
    return calibration


def _require_live(dataset: Dataset) -> Dataset:
    """Refuse (409) a deleted dataset before anything else, so a dry run never quotes a fit
    that could not be charged."""
    if dataset.deleted_at is not None:
        raise budgets.DatasetDeletedError(
            f"dataset {dataset.id} was deleted; it can no longer be charged or fitted"
        )
    return dataset


def _cost(request: FitRequest, calibration: Calibration) -> tuple[float, float]:
    """(ε, δ) to charge: the calibration's totals; nothing for the non-private baseline,
    which claims no privacy at all (its record says so)."""
    if request.mechanism in NO_DP_MECHANISMS or not math.isfinite(calibration.epsilon):
        return 0.0, 0.0
    return float(calibration.epsilon), float(calibration.delta)


def quote_fit(
    uow: UnitOfWork, *, dataset_id: str, request: FitRequest, actor: Principal
) -> FitQuote:
    """The dry run: cost and calibration from public quantities; spends nothing."""
    with uow:
        dataset = _require_live(get_owned_dataset(uow, dataset_id=dataset_id, actor=actor))
        remaining_epsilon, remaining_delta = budgets.remaining(dataset)
    calibration = _calibrate(dataset, request)
    epsilon, delta = _cost(request, calibration)
    return FitQuote(
        mechanism=request.mechanism,
        epsilon=epsilon,
        delta=delta,
        private=request.mechanism not in NO_DP_MECHANISMS,
        expected_noise_norm=calibration.expected_noise_norm,
        composition=calibration.composition,
        calibration=json_safe(dict(calibration.details)),
        remaining_epsilon=remaining_epsilon,
        remaining_delta=remaining_delta,
    )


def _same_request(job: Job, dataset_id: str, request: FitRequest) -> bool:
    return job.dataset_id == dataset_id and dict(job.params) == request.to_params()


def _existing(
    uow: UnitOfWork, *, owner: str, key: str, dataset_id: str, request: FitRequest
) -> Job | None:
    job = uow.jobs.get_by_idempotency_key(owner_site_id=owner, idempotency_key=key)
    if job is not None and not _same_request(job, dataset_id, request):
        raise InvalidInputError(
            "this Idempotency-Key was already used for a different request",
            errors=[{"loc": ["header", "Idempotency-Key"], "msg": "key reused"}],
        )
    return job


def submit_fit(
    uow: UnitOfWork,
    *,
    dataset_id: str,
    request: FitRequest,
    actor: Principal,
    runner: JobScheduler,
    idempotency_key: str | None = None,
    context: AuditContext | None = None,
) -> SubmittedFit:
    """Validate, charge and enqueue a fit (see the module docstring)."""
    owner = actor.require_site()
    check_idempotency_key(idempotency_key)
    with uow:
        dataset = get_owned_dataset(uow, dataset_id=dataset_id, actor=actor)
        if idempotency_key is not None:
            found = _existing(
                uow, owner=owner, key=idempotency_key, dataset_id=dataset_id, request=request
            )
            if found is not None:
                # a retry gets its job back, even once the dataset is gone
                return SubmittedFit(view=job_view(uow, found), created=False)
        _require_live(dataset)
    calibration = _calibrate(dataset, request)
    epsilon, delta = _cost(request, calibration)
    job_id = new_id()
    try:
        with uow:
            # The job, its audit event and its charge go to the database in one flush (the
            # charge's): the ledger's debit does not read them.
            job = uow.jobs.stage(
                Job(
                    id=job_id,
                    owner_site_id=owner,
                    kind="fit",
                    dataset_id=dataset_id,
                    params=request.to_params(),
                    status="queued",
                    idempotency_key=idempotency_key,
                )
            )
            if context is not None:
                audit.record(
                    uow,
                    action="fit.submitted",
                    actor=actor,
                    context=context,
                    subject_type="job",
                    subject_id=job_id,
                    details={
                        "dataset_id": dataset_id,
                        "mechanism": request.mechanism,
                        "epsilon": epsilon,
                        "delta": delta,
                    },
                )
            with uow.no_autoflush():
                charge = budgets.charge(
                    uow,
                    dataset_id=dataset_id,
                    epsilon=epsilon,
                    delta=delta,
                    mechanism=request.mechanism,
                    job_id=job_id,
                    idempotency_key=idempotency_key,
                )
            # The answer, from the rows this transaction wrote (no query).
            view = JobView(job, (job_charge(charge),))
            uow.commit()
    except (IntegrityConflictError, budgets.DuplicateChargeError):
        if idempotency_key is None:
            raise
        # A concurrent request with the same key committed first: return its job.
        with uow:
            found = _existing(
                uow, owner=owner, key=idempotency_key, dataset_id=dataset_id, request=request
            )
            if found is None:
                raise ConflictError(
                    "a request with this Idempotency-Key is being processed; retry"
                ) from None
            return SubmittedFit(view=job_view(uow, found), created=False)
    try:
        runner.submit(job_id)
    except Exception:
        logger.exception("job %s stays queued: the runner did not accept it", job_id)
    return SubmittedFit(view=view, created=True)
