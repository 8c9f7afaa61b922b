"""Privately tuned fits (issue 16 item 2): a fit whose ``regularization`` is a list of
candidates, ``{"candidates": [λ₁, …, λ_k]}``.

The job (kind ``tuned_fit``) runs :func:`service.dp.selection.tune`: candidate i is fitted on
the i-th of k + 1 disjoint parts at the request's full (ε, δ), the held-out part's error counts
choose one with the exponential mechanism at ε, and only the chosen model is released. The
total cost is the request's (ε, δ) by parallel composition (derivation in
:mod:`service.dp.selection`); it is charged with the job, like a fit.

Validation before anything is spent: 1 ≤ k ≤ :data:`MAX_CANDIDATES` distinct candidates, each
a valid λ, and the mechanism calibrated for *every* candidate at the part size ⌊n/(k+1)⌋ (so a
candidate the mechanism cannot run at that size is a 422, not a failed job).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.db.models import Dataset, Model, new_id
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.catalog import get_owned_dataset, read_design, require_live
from service.domain.errors import InvalidInputError, NotFoundError
from service.domain.fits.submit import FitQuote, FitRequest
from service.domain.fits.submit import _calibrate as calibrate_fit
from service.domain.jobs.charged import (
    DatasetCharge,
    JobDraft,
    Pricing,
    SubmittedJob,
    submit_charged_job,
)
from service.domain.jobs.lifecycle import (
    ClaimedJob,
    JobContext,
    JobScheduler,
    Release,
    charged_amounts,
)
from service.domain.jobs.lifecycle import _dataset_facts as dataset_facts
from service.domain.ledger import budgets
from service.domain.ranges import MAX_REGULARIZATION, MIN_REGULARIZATION
from service.domain.records.base import fit_privacy_record, json_safe, software_version
from service.dp import NON_PRIVATE_MECHANISMS, Calibration, FitResult
from service.dp.prepared import PreparedDesign
from service.dp.selection import MAX_CANDIDATES, part_size, tune

__all__ = [
    "MAX_CANDIDATES",
    "TUNED_FIT_KIND",
    "TunedFitRequest",
    "quote_tuned_fit",
    "run_tuned_fit_job",
    "submit_tuned_fit",
]

TUNED_FIT_KIND = "tuned_fit"


@dataclass(frozen=True, slots=True)
class TunedFitRequest:
    """A fit with candidate regularisations; ``base.regularization`` is ignored."""

    base: FitRequest
    candidates: tuple[float, ...]

    def to_params(self) -> dict[str, Any]:
        params = self.base.to_params()
        params["regularization"] = {"candidates": [float(c) for c in self.candidates]}
        return params


def _invalid(msg: str) -> InvalidInputError:
    return InvalidInputError(
        msg, errors=[{"loc": ["body", "regularization", "candidates"], "msg": msg}]
    )


def _check(dataset: Dataset, request: TunedFitRequest) -> tuple[float, float, Calibration]:
    """422 for a bad candidate list; else the cost (max over candidates, parallel
    composition) and the first candidate's calibration at the part size."""
    candidates = request.candidates
    if not 1 <= len(candidates) <= MAX_CANDIDATES:
        raise _invalid(f"give between 1 and {MAX_CANDIDATES} candidates")
    if len(set(candidates)) != len(candidates):
        raise _invalid("candidates must be distinct")
    for lam in candidates:
        if not (math.isfinite(lam) and MIN_REGULARIZATION <= lam <= MAX_REGULARIZATION):
            raise _invalid(
                f"each candidate must be between {MIN_REGULARIZATION:g} and {MAX_REGULARIZATION:g}"
            )
    if request.base.mechanism in NON_PRIVATE_MECHANISMS or request.base.epsilon is None:
        raise InvalidInputError(
            "private tuning needs a private mechanism and an epsilon",
            errors=[{"loc": ["body", "mechanism"], "msg": "not a private mechanism"}],
        )
    m = part_size(int(dataset.n_rows), len(candidates))
    if m < 2:
        raise _invalid("too few rows for this many candidates (each part needs ≥ 2 rows)")
    # calibrate every candidate on a stand-in with the part's public size
    part = _PartFacts(dataset, m)
    costs = []
    first: Calibration | None = None
    for lam in candidates:
        calibration = calibrate_fit(
            part.as_dataset(),
            FitRequest(
                mechanism=request.base.mechanism,
                epsilon=request.base.epsilon,
                delta=request.base.delta,
                loss=request.base.loss,
                regularization=lam,
                params=request.base.params,
            ),
        )
        first = first or calibration
        costs.append((float(calibration.epsilon), float(calibration.delta)))
    assert first is not None
    selection_epsilon = float(request.base.epsilon)
    epsilon = max(max(c[0] for c in costs), selection_epsilon)
    delta = max(c[1] for c in costs)
    return epsilon, delta, first


@dataclass(frozen=True, slots=True)
class _PartFacts:
    """The public facts of a part of ``dataset`` with ``n`` rows, for calibration."""

    dataset: Dataset
    n: int

    def as_dataset(self) -> Dataset:
        return Dataset(
            id=self.dataset.id,
            n_rows=self.n,
            n_features=self.dataset.n_features,
            allow_non_private=self.dataset.allow_non_private,
        )


def quote_tuned_fit(
    uow: UnitOfWork, *, dataset_id: str, request: TunedFitRequest, actor: Principal
) -> FitQuote:
    """The dry run of a tuned fit: its total cost; spends nothing."""
    with uow:
        dataset = require_live(get_owned_dataset(uow, dataset_id=dataset_id, actor=actor))
        remaining_epsilon, remaining_delta = budgets.remaining(dataset)
    epsilon, delta, calibration = _check(dataset, request)
    details = json_safe(dict(calibration.details))
    details["tuning"] = {
        "candidates": list(request.candidates),
        "part_size": part_size(int(dataset.n_rows), len(request.candidates)),
        "parts": len(request.candidates) + 1,
    }
    return FitQuote(
        mechanism=request.base.mechanism,
        epsilon=epsilon,
        delta=delta,
        private=True,
        expected_noise_norm=calibration.expected_noise_norm,
        composition="parallel over k + 1 disjoint parts: each candidate's fit at (ε, δ) on "
        "its part, the exponential-mechanism choice at ε on the held-out part",
        calibration=details,
        remaining_epsilon=remaining_epsilon,
        remaining_delta=remaining_delta,
    )


def submit_tuned_fit(
    uow: UnitOfWork,
    *,
    dataset_id: str,
    request: TunedFitRequest,
    actor: Principal,
    runner: JobScheduler,
    idempotency_key: str | None = None,
    context: AuditContext | None = None,
) -> SubmittedJob:
    """Validate, charge the total (ε, δ) and enqueue a tuned fit, through the one charged-job
    contract (:func:`service.domain.jobs.charged.submit_charged_job`)."""

    def draft(u: UnitOfWork) -> JobDraft:
        dataset = get_owned_dataset(u, dataset_id=dataset_id, actor=actor)

        def price() -> Pricing:
            epsilon, delta, _ = _check(require_live(dataset), request)
            return Pricing(
                mechanism=request.base.mechanism,
                charges=[DatasetCharge(dataset.id, dataset.owner_site_id, epsilon, delta)],
                audit_action="fit.submitted",
                audit_details={
                    "dataset_id": dataset_id,
                    "mechanism": request.base.mechanism,
                    "epsilon": epsilon,
                    "delta": delta,
                    "candidates": list(request.candidates),
                },
            )

        return JobDraft(
            kind=TUNED_FIT_KIND, dataset_id=dataset.id, params=request.to_params(), price=price
        )

    return submit_charged_job(
        uow,
        actor=actor,
        draft=draft,
        runner=runner,
        idempotency_key=idempotency_key,
        context=context,
    )


def run_tuned_fit_job(
    uow_factory: UnitOfWorkFactory, job: ClaimedJob, context: JobContext
) -> Release:
    """The worker: :func:`service.dp.selection.tune`, then the chosen model and its record."""
    params = job.params
    row = job.dataset
    if row is None or row.deleted_at is not None:
        raise NotFoundError("dataset")
    facts = dataset_facts(row)
    design = read_design(uow_factory, row)
    candidates: Sequence[float] = params["regularization"]["candidates"]
    epsilon = float(params["epsilon"])
    delta = float(params["delta"])
    rng = context.randomness.generator(job.id)
    done = [0]

    def fit_one(part: PreparedDesign, lam: float) -> FitResult:
        result = context.fit(
            part,
            None,
            str(params["mechanism"]),
            rng=rng,
            epsilon=epsilon,
            delta=delta,
            loss=str(params["loss"]),
            regularization=lam,
            **dict(params.get("params") or {}),
        )
        done[0] += 1
        context.progress(done[0] / (len(candidates) + 1))
        return result

    tuned = tune(design, candidates, epsilon=epsilon, fit_one=fit_one, rng=rng)
    record = fit_privacy_record(
        tuned.result,
        datasets=[facts.ref],
        randomness=context.randomness,
        job_id=job.id,
        charged=charged_amounts(job),
        version=software_version(),
    )
    record["tuning"] = tuned.record(epsilon, delta)
    model = Model(
        id=new_id(),
        owner_site_id=job.owner_site_id,
        source="fit",
        mechanism=tuned.result.mechanism,
        loss=str(params["loss"]),
        feature_names=facts.feature_names,
        preprocessing=facts.preprocessing,
        body=json_safe(tuned.result.model.to_dict()),
        label=facts.label,
        privacy=record,
        dataset_id=job.dataset_id,
        job_id=job.id,
    )
    # Parallel composition: every candidate and the selection read disjoint parts at (ε, δ).
    return Release(
        model=model, spent={str(job.dataset_id): (tuned.result.epsilon, tuned.result.delta)}
    )
