"""Quote and submit a tuned fit: the dry run's cost and calibration, and the charged job
(:func:`service.domain.jobs.charged.submit_charged_job`) whose ``params.tuning_decision``
fixes, at submission, what the worker runs."""

from __future__ import annotations

from typing import Any

from service.db.uow import UnitOfWork
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.catalog import get_owned_dataset, require_live
from service.domain.errors import InvalidInputError
from service.domain.fits.submit import FitQuote
from service.domain.fits.tuning.decision import _check, _Checked
from service.domain.fits.tuning.request import TunedFitRequest, for_dataset
from service.domain.jobs.charged import (
    DatasetCharge,
    JobDraft,
    Pricing,
    SubmittedJob,
    submit_charged_job,
)
from service.domain.jobs.lifecycle import JobScheduler
from service.domain.ledger import budgets
from service.domain.records.base import json_safe
from service.dp.analysis.selection_choice import MAX_COST_FACTOR, part_size

__all__ = ["TUNED_FIT_KIND", "quote_tuned_fit", "submit_tuned_fit"]


TUNED_FIT_KIND = "tuned_fit"


def quote_tuned_fit(
    uow: UnitOfWork, *, dataset_id: str, request: TunedFitRequest, actor: Principal
) -> FitQuote:
    """The dry run of a tuned fit: its total cost; spends nothing."""
    with uow:
        dataset = require_live(get_owned_dataset(uow, dataset_id=dataset_id, actor=actor))
        remaining_epsilon, remaining_delta = budgets.remaining(dataset)
    checked = _check(dataset, for_dataset(request, dataset))
    calibration = checked.calibration
    details = json_safe(dict(calibration.details))
    if checked.declined:
        return _quote_rule_only(checked, details, remaining_epsilon, remaining_delta)
    request = checked.request
    settings = request.settings()
    common: dict[str, Any] = {
        "candidates": list(request.regularizations),
        **(
            {} if request.step_sizes is None else {"step_size_candidates": list(request.step_sizes)}
        ),
        "grid": [s.to_dict() for s in settings],
    }
    if checked.plan is None:
        details["tuning"] = common | {
            "part_size": part_size(int(dataset.n_rows), len(settings)),
            "parts": len(settings) + 1,
        }
        composition = (
            "parallel over k + 1 disjoint parts: each grid point's fit at (ε, δ) on "
            "its part, the exponential-mechanism choice at ε on the held-out part"
        )
    else:
        details["tuning"] = common | json_safe(checked.plan.record())
        composition = (
            "random repetition: a random number of runs (mean "
            f"{checked.plan.law.mean:.4g}, not released), each a uniformly drawn grid point "
            + (
                "fitted on all rows at (ε_t, 0)"
                if checked.plan.base == "pure"
                else "fitted on all rows with Gaussian noise (T releases at multiplier "
                f"{checked.plan.fit_multiplier:.6g}, accounted by their Rényi curve)"
            )
            + " and scored at ε_s; the best run is released (Papernot and Steinke 2022 Thm 2)"
        )
    details["tuning"] |= checked.decision()
    return FitQuote(
        mechanism=request.base.mechanism,
        epsilon=checked.epsilon,
        delta=checked.delta,
        private=True,
        expected_noise_norm=calibration.expected_noise_norm,
        composition=composition,
        calibration=details,
        remaining_epsilon=remaining_epsilon,
        remaining_delta=remaining_delta,
    )


def _quote_rule_only(
    checked: _Checked,
    details: dict[str, Any],
    remaining_epsilon: float,
    remaining_delta: float,
) -> FitQuote:
    """The quote of a tuning ``auto`` declines: the automatic λ's one fit at (ε, δ)."""
    rule = checked.rule
    assert rule is not None
    details["tuning"] = checked.decision() | {"chosen_regularization": rule.fitted_regularization}
    projected = (
        ""
        if rule.projection is None
        else f" projected to k = {rule.projection['projection_dim']} dimensions (auto's rule)"
    )
    return FitQuote(
        mechanism=checked.request.base.mechanism,
        epsilon=checked.epsilon,
        delta=checked.delta,
        private=True,
        expected_noise_norm=checked.calibration.expected_noise_norm,
        composition="no selection (auto declined to tune, κ = "
        f"{rule.cost_factor:.3g} > {MAX_COST_FACTOR:g}): one fit of the automatic λ = "
        f"{rule.fitted_regularization:.4g} on all rows at (ε, δ){projected}; "
        f"{checked.calibration.composition}",
        calibration=details,
        remaining_epsilon=remaining_epsilon,
        remaining_delta=remaining_delta,
        regularization=rule.fitted_regularization,
        regularization_rule=rule.projected_record or rule.record,
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
    contract (:func:`service.domain.jobs.charged.submit_charged_job`). The selection decision
    (public) is fixed here and stored in the job's ``params.tuning_decision``; the worker runs
    exactly it."""

    def draft(u: UnitOfWork) -> JobDraft:
        dataset = get_owned_dataset(u, dataset_id=dataset_id, actor=actor)
        concrete = for_dataset(request, dataset)
        params = concrete.to_params()
        checked: _Checked | None = None
        try:
            checked = _check(dataset, concrete)
        except InvalidInputError:
            if dataset.deleted_at is None:
                raise
            # deleted: ``price`` answers first, as for any fit of a deleted dataset
        if checked is not None:
            # a deterministic function of public inputs: a retry repeats it
            params["tuning_decision"] = checked.decision()

        def price() -> Pricing:
            require_live(dataset)
            assert checked is not None
            epsilon, delta, work = checked.epsilon, checked.delta, checked.work
            return Pricing(
                mechanism=request.base.mechanism,
                charges=[DatasetCharge(dataset.id, dataset.owner_site_id, epsilon, delta)],
                audit_action="fit.submitted",
                audit_details={
                    "dataset_id": dataset_id,
                    "mechanism": request.base.mechanism,
                    "epsilon": epsilon,
                    "delta": delta,
                    "candidates": list(checked.request.regularizations),
                    "selection": checked.choice.method,
                    **(
                        {}
                        if request.step_sizes is None
                        else {"step_size_candidates": list(request.step_sizes)}
                    ),
                },
                work=work,
            )

        return JobDraft(kind=TUNED_FIT_KIND, dataset_id=dataset.id, params=params, price=price)

    return submit_charged_job(
        uow,
        actor=actor,
        draft=draft,
        runner=runner,
        idempotency_key=idempotency_key,
        context=context,
    )
