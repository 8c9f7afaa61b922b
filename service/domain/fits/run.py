"""The worker's half of a single-dataset fit: read the design, run the mechanism, and return
the model with its privacy record (registered in :mod:`service.runtime.worker`).

The job runs the typed plan stored at submission (``job.plan``, :mod:`service.dp.core.plan`):
the worker rebuilds it, re-derives the plan from the job's params and the dataset's public
n, d only as a check (:func:`checked_plan`; a difference fails the job ``plan-mismatch``
before any data is read or noise drawn), and hands the stored plan to ``service.dp.fit``. A
job stored without a plan (older rows) is calibrated afresh, as before."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from service.db.models import Dataset, Model, new_id
from service.db.uow import UnitOfWorkFactory
from service.domain.datasets.catalog import dataset_task, read_design
from service.domain.fits.auto import run_private_baseline
from service.domain.fits.expected_tasks import run_task_private_baseline
from service.domain.jobs.lifecycle import ClaimedJob, JobContext, Release, charged_amounts
from service.domain.records.base import (
    DatasetRef,
    fit_privacy_record,
    json_safe,
    software_version,
)
from service.dp import NON_PRIVATE_MECHANISMS, Plan, PlanMismatchError, calibrate
from service.dp.analysis.auto_simulation import TRANSFER
from service.dp.core.plan import plan_from_json, require_same_plan
from service.dp.multisite.transfer import transfer_fit

#: Job params a fit's record repeats (set at submission by service.domain.fits.auto).
RECORDED_EXTRAS = ("requested_mechanism", "auto", "expected_accuracy", "warnings")


def fit_kwargs(params: Mapping[str, Any]) -> dict[str, Any]:
    epsilon = params.get("epsilon")
    return {
        "epsilon": math.inf if epsilon is None else float(epsilon),
        "delta": float(params["delta"]),
        "loss": str(params["loss"]),
        "regularization": float(params["regularization"]),
        **dict(params.get("params") or {}),
    }


def run_fit_job(uow_factory: UnitOfWorkFactory, job: ClaimedJob, context: JobContext) -> Release:
    """A single-dataset fit: read the design, ``service.dp.fit``, the model and its record.

    Spent: the (ε, δ) the mechanism reports for the run (``FitResult``), or (0, 0) for a
    mechanism that claims no privacy."""
    if job.dataset_id is None:
        raise LookupError("fit job without a dataset")
    params = job.params
    row = job.live_dataset()
    mechanism = str(params["mechanism"])
    # the task (and K) of the dataset's label: public, fixed at upload
    kwargs = {**fit_kwargs(params), **dataset_task(row).dp_kwargs}
    planned: dict[str, Any] = {}
    if job.plan is not None:
        planned["plan"] = checked_plan(
            job.plan, mechanism, n=int(row.n_rows), d=int(row.n_features), kwargs=kwargs
        )
    dataset = dataset_facts(row)
    design = read_design(uow_factory, row)
    rng = context.randomness.generator(job.id)
    if params["mechanism"] == TRANSFER:
        # auto's hypothesis transfer towards the site's public model (service.dp.analysis.auto)
        own = dict(params.get("params") or {})
        result = transfer_fit(
            design.X,
            design.y,
            np.asarray(own["source"], dtype=np.float64),
            epsilon=float(params["epsilon"]),
            transfer_strength=float(own["transfer_strength"]),
            regularization=float(params["regularization"]),
            loss=str(params["loss"]),
            rng=rng,
            progress=context.progress,
        )
    else:
        result = context.fit(
            design,
            None,
            mechanism,
            rng=rng,
            progress=context.progress,
            **planned,
            **kwargs,
        )
    record = fit_privacy_record(
        result,
        datasets=[dataset.ref],
        randomness=context.randomness,
        job_id=job.id,
        charged=charged_amounts(job),
        version=software_version(),
    )
    rule = params.get("regularization_rule")
    if rule is not None:  # λ chosen by the public rule at submission (docs: regularization)
        record["calibration"]["regularization_rule"] = json_safe(rule)
    # auto's choice (with every candidate's predicted figures), the expected accuracy band
    # and any warning, fixed at submission from public inputs (service.domain.fits.auto)
    for key in RECORDED_EXTRAS:
        if key in params:
            record[key] = json_safe(params[key])
    private = result.mechanism not in NON_PRIVATE_MECHANISMS
    spent = (float(result.epsilon), float(result.delta)) if private else (0.0, 0.0)
    plan = params.get("private_baseline")
    if plan is not None and private:
        # auto without a public baseline: the noisy label count (or, for multi-class and
        # numeric labels, histogram or label sums; charged with the fit at submission), then
        # the band and warning at the noisy baseline (post-processing)
        task = dataset_task(row)
        count, expected, warnings = (
            run_private_baseline
            if task.task == "binary"
            else partial(run_task_private_baseline, task=task)
        )(
            plan,
            np.asarray(design.y),
            rng=rng,
            mechanism=mechanism,
            regularization=float(params["regularization"]),
            params=dict(params.get("params") or {}),
            n=int(row.n_rows),
            d=int(row.n_features),
            epsilon=float(params["epsilon"]),
            delta=float(params["delta"]),
            loss=str(params["loss"]),
        )
        count["composition"] = (
            f"basic sequential composition with the model: {float(result.epsilon)!r} + "
            f"{float(count['epsilon'])!r} ≤ the job's charge"
        )
        record["private_baseline"] = json_safe(count)
        if expected is not None:
            record["expected_accuracy"] = json_safe(expected)
        record["warnings"] = json_safe([*(params.get("warnings") or []), *warnings])
        spent = (spent[0] + float(count["epsilon"]), spent[1])
    model = Model(
        id=new_id(),
        owner_site_id=job.owner_site_id,
        source="fit",
        mechanism=result.mechanism,
        loss=str(params["loss"]),
        feature_names=dataset.feature_names,
        preprocessing=dataset.preprocessing,
        body=json_safe(result.model.to_dict()),
        label=dataset.label,
        privacy=record,
        dataset_id=job.dataset_id,
        job_id=job.id,
    )
    return Release(model=model, spent={job.dataset_id: spent})


def checked_plan(
    stored: Mapping[str, Any], mechanism: str, *, n: int, d: int, kwargs: Mapping[str, Any]
) -> Plan:
    """The plan stored at submission, rebuilt, once the plan re-derived from the job's params
    and the public n, d agrees with it exactly (:func:`require_same_plan`);
    :class:`PlanMismatchError` otherwise, or when the stored form cannot be read."""
    try:
        plan = plan_from_json(stored)
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanMismatchError(
            f"the plan stored at submission cannot be read ({type(exc).__name__})"
        ) from None
    derived = calibrate(mechanism, n=n, d=d, **dict(kwargs)).plan
    if derived is None:
        raise PlanMismatchError(f"{mechanism} derives no plan to check the stored one against")
    return require_same_plan(plan, derived)


@dataclass(frozen=True, slots=True)
class DatasetFacts:
    """The public facts of a dataset a fitted model carries."""

    ref: DatasetRef
    feature_names: list[str]
    preprocessing: dict[str, Any]
    label: dict[str, Any]


def dataset_facts(dataset: Dataset) -> DatasetFacts:
    """Name, encoded features, preprocessing and label of a (live) dataset row."""
    return DatasetFacts(
        ref=DatasetRef(id=dataset.id, name=dataset.name),
        feature_names=list(dataset.feature_names),
        preprocessing=dict(dataset.preprocessing),
        label=dict(dataset.spec.get("label", {})),
    )
