"""Fit requests: validate, quote, charge and enqueue (issue 4 item 3, docs/design.md §2 and §4).

A fit is a charged job (:mod:`service.domain.jobs.charged`, which writes the ledger order,
``Idempotency-Key`` and the hand-off to the runner once for every charged job); this module
holds what is particular to a fit: the caller's own live dataset, validated on its public n and
d with :func:`service.dp.calibrate` (an unknown mechanism, a bad ε/δ/λ or parameter is a 422
before anything is spent), charged the calibration's (ε, δ), nothing for the non-private
baseline. The worker's half is :func:`service.domain.fits.run.run_fit_job`.

A dry run (:func:`quote_fit`) stops after the calibration and returns the exact cost.

The dataset's label decides the task (:mod:`service.domain.datasets.labels`): binary,
multiclass or regression, passed to :func:`service.dp.calibrate` with K, so a mechanism that
does not fit the task is a 422 before anything is charged. A request without a loss gets the
task's default (``logistic`` for class labels, ``squared`` for numeric ones). Mechanism
``auto`` and λ ``"auto"`` have their own rules for the other tasks
(:mod:`service.domain.fits.auto_tasks`, :mod:`service.dp.analysis.regularization_tasks`);
the expected band against the trivial model is :mod:`service.domain.fits.expected_tasks`'s.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from service.db.models import Dataset
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.catalog import dataset_task, get_owned_dataset, require_live
from service.domain.errors import InvalidInputError
from service.domain.fits import auto as fit_auto
from service.domain.fits.auto_tasks import resolve_task_auto
from service.domain.fits.expected_tasks import task_baseline_slice, with_task_band
from service.domain.jobs.charged import (
    DatasetCharge,
    JobDraft,
    Pricing,
    SubmittedJob,
    submit_charged_job,
)
from service.domain.jobs.lifecycle import JobScheduler
from service.domain.ledger import budgets
from service.domain.ranges import (
    MAX_REGULARIZATION,
    MIN_REGULARIZATION,
    calibrated,
    check_calibration,
)
from service.domain.records.base import json_safe
from service.dp import MECHANISMS, NON_PRIVATE_MECHANISMS, Calibration, calibrate
from service.dp.analysis.regularization import auto_regularization
from service.dp.analysis.regularization_tasks import auto_regularization_task, task_record
from service.dp.analysis.work import fit_work
from service.dp.core.plan import plan_to_json
from service.dp.core.tasks import TASK_LOSSES
from service.dp.mechanisms.objective_perturbation import rule_dimension

__all__ = [
    "AUTO",
    "FitQuote",
    "FitRequest",
    "quote_fit",
    "resolve_regularization",
    "submit_fit",
]

#: The ``regularization`` value (and the meaning of an omitted one) that lets PrivFit choose
#: λ from public quantities (:mod:`service.dp.analysis.regularization`).
AUTO = "auto"

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FitRequest:
    """A fit as requested (already well-formed; the mechanism's rules are checked here).

    ``regularization`` is a λ or :data:`AUTO`; :func:`resolve_regularization` turns ``AUTO``
    into the λ of the public rule for the dataset's n and d, and keeps the rule's record in
    ``regularization_rule`` (shown in the job's params, the quote's and the model's
    calibration)."""

    mechanism: str
    epsilon: float | None
    delta: float = 0.0
    loss: str = "logistic"
    #: A number, ``"auto"`` (the public rule, :func:`resolve_regularization`), or None only
    #: with mechanism ``auto`` (which then chooses λ too).
    regularization: float | str | None = 1e-3
    params: Mapping[str, Any] = field(default_factory=dict)
    regularization_rule: Mapping[str, Any] | None = None
    #: False: the request named no loss, and the dataset's task chooses it (:func:`for_task`).
    loss_given: bool = True

    @property
    def lam(self) -> float:
        """The numeric λ (after :func:`resolve_regularization`)."""
        if isinstance(self.regularization, str) or self.regularization is None:
            raise TypeError("regularization 'auto' must be resolved against the dataset first")
        return float(self.regularization)

    def to_params(self) -> dict[str, Any]:
        """The JSON stored as the job's ``params``."""
        out = {
            "mechanism": self.mechanism,
            "epsilon": None if self.epsilon is None else float(self.epsilon),
            "delta": float(self.delta),
            "loss": self.loss,
            "regularization": (
                self.regularization
                if self.regularization is None or isinstance(self.regularization, str)
                else float(self.regularization)
            ),
            "params": json_safe(dict(self.params)),
        }
        if self.regularization_rule is not None:
            out["regularization_rule"] = json_safe(dict(self.regularization_rule))
        return out


def for_task(request: FitRequest, dataset: Dataset) -> FitRequest:
    """``request`` for the dataset's task: without a loss of its own it gets the task's
    default loss (the first of :data:`~service.dp.core.tasks.TASK_LOSSES`); mechanism
    ``auto`` and λ ``"auto"`` have rules of their own for the other tasks
    (:mod:`.auto_tasks`, :mod:`service.dp.analysis.regularization_tasks`)."""
    task = dataset_task(dataset).task
    if not request.loss_given:
        request = replace(request, loss=TASK_LOSSES[task][0], loss_given=True)
    return request


def resolve_regularization(
    request: FitRequest, *, n: int, d: int, task: str = "binary", n_classes: int = 2
) -> FitRequest:
    """``request`` with ``regularization="auto"`` replaced by the public rule's λ for (n, d,
    ε, δ, loss, mechanism) and its record (unchanged for a numeric λ). The λ is a function of
    public quantities only, so choosing it costs nothing; a mechanism without a rule, or
    inputs the rule refuses, is a 422 (before anything is charged)."""
    if request.regularization != AUTO:
        return request
    if request.mechanism not in MECHANISMS:
        return request  # _calibrate names the unknown mechanism
    if request.epsilon is None and request.mechanism not in NON_PRIVATE_MECHANISMS:
        return request  # _calibrate asks for ε
    if task != "binary":  # the multi-class and regression rules (issue 29)
        return _resolve_task_regularization(request, n=n, d=d, task=task, n_classes=n_classes)
    # a projected fit solves in ℝ^k: the rule is evaluated at the dimension of its noise
    dim = rule_dimension(request.mechanism, int(d), request.params)
    try:
        choice = auto_regularization(
            request.mechanism,
            n=int(n),
            d=dim,
            epsilon=request.epsilon,
            delta=request.delta,
            loss=request.loss,
            params=request.params,
            bounds=(MIN_REGULARIZATION, MAX_REGULARIZATION),
        )
    except ValueError as exc:
        raise InvalidInputError(
            f"regularization 'auto': {exc}",
            errors=[{"loc": ["body", "regularization"], "msg": str(exc)}],
        ) from exc
    return replace(
        request,
        regularization=choice.regularization,
        regularization_rule=projected_rule(choice.record(), int(d), dim),
    )


def projected_rule(record: dict[str, Any], d: int, dim: int) -> dict[str, Any]:
    """The λ rule's record; for a projected fit (``dim`` = k ≠ d) its inputs also name the
    number of features the rows had before the projection (its ``d`` is k)."""
    if dim != d:
        record["inputs"] = {**record["inputs"], "features_before_projection": d}
    return record


def _resolve_task_regularization(
    request: FitRequest, *, n: int, d: int, task: str, n_classes: int
) -> FitRequest:
    """:func:`resolve_regularization` for a multi-class or numeric label."""
    try:
        choice = auto_regularization_task(
            request.mechanism,
            task=task,
            n_classes=n_classes,
            n=int(n),
            d=int(d),
            epsilon=request.epsilon,
            delta=request.delta,
            loss=request.loss,
            params=request.params,
            bounds=(MIN_REGULARIZATION, MAX_REGULARIZATION),
        )
    except ValueError as exc:
        raise InvalidInputError(
            f"regularization 'auto': {exc}",
            errors=[{"loc": ["body", "regularization"], "msg": str(exc)}],
        ) from exc
    return replace(
        request, regularization=choice.regularization, regularization_rule=task_record(choice)
    )


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
    regularization: float | None = None
    regularization_rule: Mapping[str, Any] | None = None
    auto: dict[str, Any] | None = None
    expected_accuracy: dict[str, Any] | None = None
    warnings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def affordable(self) -> bool:
        return self.epsilon <= self.remaining_epsilon and self.delta <= self.remaining_delta


def _calibrate(dataset: Dataset, request: FitRequest) -> Calibration:
    """The calibration of a resolved ``request`` (:func:`resolve_regularization`), with the
    λ rule's record as ``regularization_rule`` when λ was chosen by it."""
    if request.mechanism == fit_auto.AUTO:
        raise TypeError("resolve auto before calibrating")
    if request.mechanism == fit_auto.TRANSFER:
        return _calibrate_transfer(dataset, request)
    if request.mechanism not in MECHANISMS:
        raise InvalidInputError(
            f"unknown mechanism {request.mechanism!r}; choose one of "
            + ", ".join(sorted(MECHANISMS)),
            errors=[{"loc": ["body", "mechanism"], "msg": "unknown mechanism"}],
        )
    if request.mechanism in NON_PRIVATE_MECHANISMS and not dataset.allow_non_private:
        raise InvalidInputError(
            "this dataset does not allow non-private fits (it was uploaded without "
            "allow_non_private)",
            errors=[{"loc": ["body", "mechanism"], "msg": "non_private is not allowed here"}],
        )
    if request.epsilon is None and request.mechanism not in NON_PRIVATE_MECHANISMS:
        raise InvalidInputError(
            f"epsilon is required for {request.mechanism}",
            errors=[{"loc": ["body", "epsilon"], "msg": "required for a private mechanism"}],
        )
    task = dataset_task(dataset)
    calibration = calibrated(
        "fit",
        lambda: calibrate(
            request.mechanism,
            n=dataset.n_rows,
            d=dataset.n_features,
            epsilon=math.inf if request.epsilon is None else request.epsilon,
            delta=request.delta,
            loss=request.loss,
            regularization=_required_regularization(request),
            task=task.task,
            n_classes=task.n_classes,
            **dict(request.params),
        ),
    )
    if request.mechanism not in NON_PRIVATE_MECHANISMS:
        check_calibration(
            epsilon=calibration.epsilon,
            delta=calibration.delta,
            details=calibration.details,
            noise_norm=calibration.expected_noise_norm,
        )
    if request.regularization_rule is not None:
        details = dict(calibration.details)
        details["regularization_rule"] = dict(request.regularization_rule)
        calibration = replace(calibration, details=details)
    return calibration


def _calibrate_transfer(dataset: Dataset, request: FitRequest) -> Calibration:
    """Auto's transfer candidate (only auto chooses it; its source is public): objective
    perturbation calibrated at strong convexity λ + η
    (:func:`service.dp.multisite.transfer.transfer_fit`), spending exactly ε."""
    params = dict(request.params)
    eta = float(params.pop("transfer_strength"))
    params.pop("source")
    lam = _required_regularization(request)
    if request.epsilon is None:
        raise TypeError("a transfer fit has an ε")
    if params.get("projection_dim") is not None:  # the worker's transfer_fit never projects
        raise TypeError("a transfer fit's centre lives in ℝ^d: it has no projection")
    epsilon = float(request.epsilon)
    calibration = calibrated(
        "fit",
        lambda: calibrate(
            "objective_perturbation",
            n=dataset.n_rows,
            d=dataset.n_features,
            epsilon=epsilon,
            delta=0.0,
            loss=request.loss,
            regularization=lam + eta,
            **params,
        ),
    )
    check_calibration(
        epsilon=calibration.epsilon,
        delta=calibration.delta,
        details=calibration.details,
        noise_norm=calibration.expected_noise_norm,
    )
    return calibration


def _required_regularization(request: FitRequest) -> float:
    if request.regularization is None:
        raise InvalidInputError(
            "regularization is required (or use mechanism auto, which chooses it)",
            errors=[{"loc": ["body", "regularization"], "msg": "required"}],
        )
    return request.lam


def _resolve(
    uow: UnitOfWork,
    uow_factory: UnitOfWorkFactory | None,
    dataset: Dataset,
    request: FitRequest,
) -> tuple[FitRequest, Calibration, fit_auto.Assessment | None]:
    """Inside an open ``with uow:``: the concrete request (auto resolved, docs/design.md §3),
    its calibration (422s first, for a concrete mechanism) and the assessment (the band and
    warnings; None for the non-private baseline, and for other tasks without a public
    reference or a private baseline: :mod:`.expected_tasks`)."""
    loss_requested = request.loss if request.loss_given else None
    request = for_task(request, dataset)
    task = dataset_task(dataset)
    if request.mechanism == fit_auto.TRANSFER:
        # only auto chooses transfer, with the site's public model as its source
        raise InvalidInputError(
            "unknown mechanism 'transfer'; choose one of "
            + ", ".join(sorted(MECHANISMS))
            + " (auto may choose a transfer towards your public reference's model)",
            errors=[{"loc": ["body", "mechanism"], "msg": "unknown mechanism"}],
        )
    # mechanism auto on a multi-class or numeric label without a public reference:
    # a slice of ε for the private trivial-model baseline, the fit at the rest (issue 29)
    request, baseline_plan = task_baseline_slice(uow, uow_factory, dataset, request)
    if request.mechanism != fit_auto.AUTO:
        # λ "auto" (or omitted) on a named mechanism: the public rule's λ
        request = resolve_regularization(
            request, n=dataset.n_rows, d=dataset.n_features, **task.dp_kwargs
        )
        calibration = _calibrate(dataset, request)
        if request.mechanism in NON_PRIVATE_MECHANISMS:
            return request, calibration, None
        if task.task != "binary":  # the band against the trivial model (issue 29)
            band = with_task_band(
                uow, uow_factory, dataset, request, None, private_baseline=baseline_plan
            )
            return request, calibration, band
    elif task.task != "binary":  # auto on a multi-class or numeric label (issue 29)
        if request.regularization == AUTO:
            request = replace(request, regularization=None)
        concrete, calibration, assessment = resolve_task_auto(
            dataset,
            request,
            loss_requested=loss_requested,
            calibrate=lambda concrete: _calibrate(dataset, concrete),
        )
        return (
            concrete,
            calibration,
            with_task_band(
                uow, uow_factory, dataset, concrete, assessment, private_baseline=baseline_plan
            ),
        )
    else:
        fit_auto.check_auto_request(epsilon=request.epsilon, params=request.params)
        if request.regularization == AUTO:  # mechanism auto chooses λ with the mechanism
            request = replace(request, regularization=None)
    reference = fit_auto.find_public_reference(uow, uow_factory, dataset)
    assessment = fit_auto.assess(
        dataset,
        mechanism=request.mechanism,
        epsilon=request.epsilon,
        delta=request.delta,
        loss=request.loss,
        regularization=None if request.regularization is None else request.lam,
        params=request.params,
        reference=reference,
    )
    concrete = fit_auto.with_assessment(request, assessment)
    if request.mechanism == fit_auto.AUTO:
        calibration = _calibrate(dataset, concrete)
    return concrete, calibration, assessment


def _cost(
    request: FitRequest,
    calibration: Calibration,
    assessment: fit_auto.Assessment | None = None,
) -> tuple[float, float]:
    """(ε, δ) to charge: the calibration's totals, plus the private majority count's ε when
    auto estimates its baseline privately (:mod:`.auto`; the fit is calibrated at the request's
    ε less that slice, so the sum is at most the request); nothing for the non-private
    baseline, which claims no privacy at all (its record says so)."""
    if request.mechanism in NON_PRIVATE_MECHANISMS or not math.isfinite(calibration.epsilon):
        return 0.0, 0.0
    epsilon = float(calibration.epsilon)
    if assessment is not None and assessment.private_baseline is not None:
        # the fit's ε and the count's compose to at most the request (split_budget): charge
        # the request, which covers both (the sum if rounding ever made it larger)
        requested = float(assessment.private_baseline["requested_epsilon"])
        epsilon = max(epsilon + assessment.baseline_epsilon, requested)
    return epsilon, float(calibration.delta)


def quote_fit(
    uow: UnitOfWork,
    *,
    dataset_id: str,
    request: FitRequest,
    actor: Principal,
    uow_factory: UnitOfWorkFactory | None = None,
) -> FitQuote:
    """The dry run: cost and calibration from public quantities; spends nothing. With
    ``uow_factory``, a public reference dataset of the site is used (:mod:`.auto`)."""
    with uow:
        dataset = require_live(get_owned_dataset(uow, dataset_id=dataset_id, actor=actor))
        remaining_epsilon, remaining_delta = budgets.remaining(dataset)
        request, calibration, assessment = _resolve(uow, uow_factory, dataset, request)
    epsilon, delta = _cost(request, calibration, assessment)
    return FitQuote(
        auto=None if assessment is None else assessment.auto,
        expected_accuracy=None if assessment is None else assessment.expected_accuracy,
        warnings=[] if assessment is None else assessment.warnings,
        mechanism=request.mechanism,
        epsilon=epsilon,
        delta=delta,
        private=request.mechanism not in NON_PRIVATE_MECHANISMS,
        expected_noise_norm=calibration.expected_noise_norm,
        composition=calibration.composition,
        calibration=json_safe(dict(calibration.details)),
        remaining_epsilon=remaining_epsilon,
        remaining_delta=remaining_delta,
        regularization=request.lam,
        regularization_rule=request.regularization_rule,
    )


def submit_fit(
    uow: UnitOfWork,
    *,
    dataset_id: str,
    request: FitRequest,
    actor: Principal,
    runner: JobScheduler,
    idempotency_key: str | None = None,
    context: AuditContext | None = None,
    uow_factory: UnitOfWorkFactory | None = None,
) -> SubmittedJob:
    """Validate, charge and enqueue a fit (:func:`submit_charged_job`): the caller's own
    dataset, charged the calibration's (ε, δ); a retry gets its job back even once the
    dataset is gone. ``regularization="auto"`` and mechanism ``auto`` are resolved here
    (deterministic functions of public inputs); the job's params carry the choice, the
    expected band and any warning, and the job stores the calibration's typed plan
    (``job.plan``), which the worker checks and runs."""

    def draft(u: UnitOfWork) -> JobDraft:
        dataset = get_owned_dataset(u, dataset_id=dataset_id, actor=actor)
        resolved: tuple[FitRequest, Calibration, fit_auto.Assessment | None] | None = None
        params = request.to_params()
        try:
            resolved = _resolve(u, uow_factory, dataset, request)
        except InvalidInputError:
            if dataset.deleted_at is None:
                raise
            # deleted: ``price`` answers 409 first, as for any fit of a deleted dataset
        if resolved is not None:
            # the params a retry must repeat: the same deterministic function of public
            # inputs, so an Idempotency-Key finds its job even once the dataset is deleted
            concrete, _, assessment = resolved
            params = concrete.to_params()
            if assessment is not None:
                params.update(assessment.job_extras())

        def price() -> Pricing:
            require_live(dataset)
            assert resolved is not None
            concrete, calibration, assessment = resolved
            epsilon, delta = _cost(concrete, calibration, assessment)
            return Pricing(
                mechanism=concrete.mechanism,
                charges=[DatasetCharge(dataset.id, dataset.owner_site_id, epsilon, delta)],
                audit_action="fit.submitted",
                audit_details={
                    "dataset_id": dataset_id,
                    "mechanism": concrete.mechanism,
                    "epsilon": epsilon,
                    "delta": delta,
                },
                work=fit_work(
                    # auto's transfer is one objective-perturbation solve
                    "objective_perturbation"
                    if concrete.mechanism == fit_auto.TRANSFER
                    else concrete.mechanism,
                    int(dataset.n_rows),
                    int(dataset.n_features),
                    calibration.details,
                ),
                # the worker runs exactly this plan (service.domain.fits.run)
                # (auto's transfer candidate has none: service.domain.fits.run runs it directly)
                plan=(
                    None
                    if calibration.plan is None or concrete.mechanism == fit_auto.TRANSFER
                    else plan_to_json(calibration.plan)
                ),
            )

        return JobDraft(kind="fit", dataset_id=dataset.id, params=params, price=price)

    return submit_charged_job(
        uow,
        actor=actor,
        draft=draft,
        runner=runner,
        idempotency_key=idempotency_key,
        context=context,
    )
