"""The worker's half of a tuned fit (registered in :mod:`service.runtime.worker`): the decision
re-derived from the job's params and checked against the stored one before any row is read,
then CMS, random repetition or the automatic λ's one fit; only the chosen model is released,
with its privacy record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from service.db.models import Model, new_id
from service.db.uow import UnitOfWorkFactory
from service.domain.datasets.catalog import dataset_task, read_design
from service.domain.fits.run import DatasetFacts, dataset_facts
from service.domain.fits.submit import FitRequest
from service.domain.fits.tuning.decision import _check, _Checked, _rule_fit, _run_params
from service.domain.fits.tuning.request import TunedFitRequest, step_size_candidates
from service.domain.jobs.lifecycle import ClaimedJob, JobContext, Release, charged_amounts
from service.domain.records.base import fit_privacy_record, json_safe, software_version
from service.dp import FitResult
from service.dp.analysis.repetition import repeat_and_select
from service.dp.analysis.selection import RuleOnlyResult, Setting, tune
from service.dp.core.plan import PlanMismatchError
from service.dp.data.prepared import PreparedDesign

__all__ = ["run_tuned_fit_job"]


def _stored_request(params: Mapping[str, Any]) -> TunedFitRequest:
    """The request back from a job's stored ``params`` (:meth:`TunedFitRequest.to_params`)."""
    regularization = params["regularization"]
    lambdas = (
        tuple(float(c) for c in regularization["candidates"])
        if isinstance(regularization, dict)
        else None
    )
    options = dict(params.get("params") or {})
    step_sizes = step_size_candidates(options)
    if step_sizes is not None:
        del options["eta"]
    base = FitRequest(
        mechanism=str(params["mechanism"]),
        epsilon=float(params["epsilon"]),
        delta=float(params["delta"]),
        loss=str(params["loss"]),
        regularization=lambdas[0] if lambdas else float(regularization),
        params=options,
    )
    # jobs stored before issue 28 have no "selection": they were CMS
    selection = str(params.get("selection", "cms"))
    return TunedFitRequest(
        base=base, candidates=lambdas, step_sizes=step_sizes, selection=selection
    )


def run_tuned_fit_job(
    uow_factory: UnitOfWorkFactory, job: ClaimedJob, context: JobContext
) -> Release:
    """The worker: :func:`service.dp.analysis.selection.tune`, then the chosen model and its
    record."""
    params = job.params
    row = job.live_dataset()
    facts = dataset_facts(row)
    stored = params.get("tuning_decision")
    # jobs stored before the decision was fixed at submission tuned without the automatic λ
    checked = _check(row, _stored_request(params), weigh_rule=stored is not None)
    if stored is not None and checked.decision() != stored:  # checked before any row is read
        raise PlanMismatchError("the tuning decision differs from the one fixed at submission")
    design = read_design(uow_factory, row)
    request = checked.request
    settings = request.settings()
    epsilon = float(params["epsilon"])
    delta = float(params["delta"])
    rng = context.randomness.generator(job.id)
    task_kwargs = dataset_task(row).dp_kwargs
    done = [0]

    def fit_one(part: PreparedDesign, setting: Setting) -> FitResult:
        result = context.fit(
            part,
            None,
            str(params["mechanism"]),
            rng=rng,
            epsilon=epsilon,
            delta=delta,
            loss=str(params["loss"]),
            regularization=setting.regularization,
            **request.setting_params(setting),
            **task_kwargs,
        )
        done[0] += 1
        context.progress(done[0] / (len(settings) + 1))
        return result

    if checked.declined:
        return _run_rule_only(job, context, design, checked, facts, rng, task_kwargs)
    if checked.plan is not None:
        return _run_repetition(job, context, design, request, checked, facts, rng)
    tuned = tune(design, settings, epsilon=epsilon, fit_one=fit_one, rng=rng)
    record = _record(job, context, facts, tuned.result)
    record["tuning"] = tuned.record(epsilon, delta) | checked.decision()
    model = _model(job, tuned.result, record, facts, str(params["loss"]))
    # Parallel composition: every candidate and the selection read disjoint parts at (ε, δ).
    return Release(
        model=model, spent={str(job.dataset_id): (tuned.result.epsilon, tuned.result.delta)}
    )


def _record(
    job: ClaimedJob, context: JobContext, facts: DatasetFacts, result: FitResult
) -> dict[str, Any]:
    """The released model's privacy record of ``result``, charged as the job was."""
    return fit_privacy_record(
        result,
        datasets=[facts.ref],
        randomness=context.randomness,
        job_id=job.id,
        charged=charged_amounts(job),
        version=software_version(),
    )


def _model(
    job: ClaimedJob, result: FitResult, record: dict[str, Any], facts: DatasetFacts, loss: str
) -> Model:
    return Model(
        id=new_id(),
        owner_site_id=job.owner_site_id,
        source="fit",
        mechanism=result.mechanism,
        loss=loss,
        feature_names=facts.feature_names,
        preprocessing=facts.preprocessing,
        body=json_safe(result.model.to_dict()),
        label=facts.label,
        privacy=record,
        dataset_id=job.dataset_id,
        job_id=job.id,
    )


def _run_repetition(
    job: ClaimedJob,
    context: JobContext,
    design: PreparedDesign,
    request: TunedFitRequest,
    checked: _Checked,
    facts: DatasetFacts,
    rng: np.random.Generator | None,
) -> Release:
    """Random repetition (:func:`service.dp.analysis.repetition.repeat_and_select`). Progress
    stays 0 until the job ends (a fraction of runs done would reveal the number of runs K, which
    is not released); a cancel is still checked before each run."""
    plan = checked.plan
    assert plan is not None
    settings = request.settings()
    base = request.base
    design_task = {"task": design.task, "n_classes": design.n_classes}

    def fit_one(full: PreparedDesign, setting: Setting) -> FitResult:
        # a constant 0: checks for a cancel (throttled by time) without showing the run count
        context.progress(0.0)
        return context.fit(
            full,
            None,
            base.mechanism,
            rng=rng,
            epsilon=plan.train_epsilon,
            delta=plan.fit_delta,
            loss=base.loss,
            regularization=setting.regularization,
            **_run_params(request, setting, plan),
            **design_task,
        )

    chosen = repeat_and_select(design, settings, plan=plan, fit_one=fit_one, rng=rng)
    if chosen.result.delta != plan.fit_delta or chosen.result.epsilon > plan.train_epsilon:
        raise RuntimeError("a run spent more than its (ε_t, δ_t)")
    if plan.base == "gaussian" and not (
        float(chosen.result.details["noise_multiplier"]) >= plan.fit_multiplier
    ):
        raise RuntimeError("a Gaussian run was less noisy than its plan")
    spent_delta = plan.delta if plan.accounting == "rdp" else 0.0
    total = replace(chosen.result, epsilon=plan.epsilon, delta=plan.delta)
    record = _record(job, context, facts, total)
    setting = settings[chosen.chosen]
    record["tuning"] = (
        {
            "candidates": list(request.regularizations),
            **(
                {}
                if request.step_sizes is None
                else {"step_size_candidates": list(request.step_sizes)}
            ),
            "grid": [s.to_dict() for s in settings],
            "chosen_index": chosen.chosen,
            "chosen_regularization": setting.regularization,
            **({} if setting.eta is None else {"chosen_eta": setting.eta}),
        }
        | json_safe(plan.record())
        | checked.decision()
    )
    record["tuning"]["fit_details"] = json_safe(dict(chosen.result.details))
    model = _model(job, chosen.result, record, facts, base.loss)
    return Release(model=model, spent={str(job.dataset_id): (plan.accounted_epsilon, spent_delta)})


def _run_rule_only(
    job: ClaimedJob,
    context: JobContext,
    design: PreparedDesign,
    checked: _Checked,
    facts: DatasetFacts,
    rng: np.random.Generator | None,
    task_kwargs: Mapping[str, Any],
) -> Release:
    """``auto`` declined to tune: the automatic λ fitted once on all rows at the request's
    (ε, δ), which is what was charged (no selection runs, nothing else is released)."""
    rule = checked.rule
    assert rule is not None
    base = _rule_fit(checked.request, rule)  # projected when auto's rule says so
    context.progress(0.0)
    result = context.fit(
        design,
        None,
        base.mechanism,
        rng=rng,
        epsilon=float(base.epsilon or 0.0),
        delta=float(base.delta),
        loss=base.loss,
        regularization=rule.fitted_regularization,
        **base.params,
        **task_kwargs,
    )
    if result.epsilon > checked.epsilon or result.delta > checked.delta:
        raise RuntimeError("the automatic λ's fit spent more than its charge")
    outcome = RuleOnlyResult(
        candidate=rule.fitted_regularization,
        result=result,
        reason=checked.choice.reason,
        candidates=rule.requested,
    )
    record = _record(job, context, facts, result)
    record["tuning"] = outcome.record(result.epsilon, result.delta) | checked.decision()
    model = _model(job, result, record, facts, base.loss)
    return Release(model=model, spent={str(job.dataset_id): (result.epsilon, result.delta)})
