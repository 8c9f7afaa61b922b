"""The worker's half of a federated fit (registered in :mod:`service.runtime.worker`; a fit with
parties on nodes is handed to :mod:`service.domain.nodes.remote_fit`): the plan fixed at
submission runs over each hosted site's own rows, and only the final model is released."""

from __future__ import annotations

from typing import Any

from service.db.uow import UnitOfWorkFactory
from service.domain.datasets.catalog import load_design
from service.domain.datasets.labels import LabelTask
from service.domain.errors import NotFoundError
from service.domain.jobs.lifecycle import (
    ClaimedJob,
    JobContext,
    PublicJobError,
    Release,
    charged_amounts,
)
from service.domain.nodes.remote_fit import reaches_nodes, run_remote_federated_job
from service.domain.records.base import json_safe
from service.domain.records.federated import federated_privacy_record
from service.domain.studies.federated.request import _PROBE_EPSILON
from service.domain.studies.membership import StudyFacts
from service.dp.core.plan import PlanMismatchError, plan_from_json
from service.dp.federated import federated_fit

__all__ = ["plan_changed", "run_federated_job"]


def plan_changed(exc: PlanMismatchError) -> PublicJobError:
    """The job's failure when the plan re-derived at run time differs from the stored one (a
    defect, never a silent re-calibration): public numbers' names only, nothing released."""
    return PublicJobError(
        "plan-mismatch",
        "The fit's plan changed after submission",
        f"{exc} No site step ran and no model was released; the charges stay.",
    )


def run_federated_job(
    uow_factory: UnitOfWorkFactory, job: ClaimedJob, context: JobContext
) -> Release:
    """Run the protocol over the granted datasets and return the final model.

    Spent: the protocol's own per-site costs for the run (``result.calibration.site_costs``,
    in the datasets' order), or (0, 0) everywhere for a run that claims no privacy.

    Each site's design is read from its own stored dataset and handed to the protocol as a
    separate site; the protocol's site steps see only their own rows. Any exception (a site's
    step, a deleted dataset, a solver that does not converge, a cancel) propagates, so the
    job fails or is cancelled with nothing released.
    """
    params = job.params
    if reaches_nodes(params):
        return run_remote_federated_job(uow_factory, job, context)
    study_id = str(params["study_id"])
    dataset_ids = [str(d) for d in params["datasets"]]
    with uow_factory() as uow:
        study = uow.studies.get(study_id)
        if study is None:
            raise NotFoundError("study")
        owners: list[dict[str, Any]] = []
        for dataset_id in dataset_ids:
            dataset = uow.datasets.get(dataset_id)
            if dataset is None or dataset.deleted_at is not None:
                raise NotFoundError("dataset")
            owners.append({"id": dataset.id, "site_id": dataset.owner_site_id})
        facts = StudyFacts.of(study)
    context.progress(0.0)
    sites = [load_design(uow_factory, dataset_id) for dataset_id in dataset_ids]
    epsilon = params.get("epsilon")
    try:
        result = federated_fit(
            sites,
            str(params["protocol"]),
            epsilon=_PROBE_EPSILON if epsilon is None else float(epsilon),
            delta=float(params["delta"]),
            loss=str(params["loss"]),
            regularization=float(params["regularization"]),
            rng=context.randomness.generator(job.id),
            progress=context.progress,
            # the plan fixed at submission runs; the fit re-derives it only as a check
            plan=None if job.plan is None else plan_from_json(job.plan),
            **LabelTask.from_label(facts.label).dp_kwargs,
            **dict(params.get("params") or {}),
        )
    except PlanMismatchError as exc:
        raise plan_changed(exc) from None
    record = federated_privacy_record(
        result.calibration,
        datasets=owners,
        randomness=context.randomness,
        job_id=job.id,
        study_id=study_id,
        charged=charged_amounts(job),
    )
    calibration = result.calibration
    spent = {
        dataset_id: (
            (float(cost.epsilon), float(cost.delta)) if calibration.private else (0.0, 0.0)
        )
        for dataset_id, cost in zip(dataset_ids, calibration.site_costs, strict=True)
    }
    model = facts.model(
        owner_site_id=job.owner_site_id,
        job_id=job.id,
        name=params.get("name"),
        source="federated",
        mechanism=result.protocol,
        loss=str(params["loss"]),
        body=json_safe(result.model.to_dict()),
        privacy=record,
    )
    return Release(model=model, spent=spent)
