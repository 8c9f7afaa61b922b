"""The worker's half of a single-dataset fit: read the design, run the mechanism, and return
the model with its privacy record (registered in :mod:`service.runtime.worker`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.db.models import Dataset, Model, new_id
from service.db.uow import UnitOfWorkFactory
from service.domain.datasets.catalog import read_design
from service.domain.jobs.lifecycle import ClaimedJob, JobContext, Release, charged_amounts
from service.domain.records.base import (
    DatasetRef,
    fit_privacy_record,
    json_safe,
    software_version,
)
from service.dp import NON_PRIVATE_MECHANISMS
from service.dp.analysis.auto import TRANSFER
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
    dataset = dataset_facts(row)
    design = read_design(uow_factory, row)
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
            rng=context.randomness.generator(job.id),
            progress=context.progress,
        )
    else:
        result = context.fit(
            design,
            None,
            str(params["mechanism"]),
            rng=context.randomness.generator(job.id),
            progress=context.progress,
            **fit_kwargs(params),
        )
    record = fit_privacy_record(
        result,
        datasets=[dataset.ref],
        randomness=context.randomness,
        job_id=job.id,
        charged=charged_amounts(job),
        version=software_version(),
    )
    # auto's choice (with every candidate's predicted figures), the expected accuracy band
    # and any warning, fixed at submission from public inputs (service.domain.fits.auto)
    for key in RECORDED_EXTRAS:
        if key in params:
            record[key] = json_safe(params[key])
    private = result.mechanism not in NON_PRIVATE_MECHANISMS
    spent = (float(result.epsilon), float(result.delta)) if private else (0.0, 0.0)
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
