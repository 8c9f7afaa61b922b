"""Private evaluations (issue 16 item 1): submit, run and read.

``POST /v1/models/{id}/evaluations`` follows a fit's order (:mod:`service.domain.fits.submit`):

1. validate everything public: the model is one the caller may read, the dataset one it owns,
   live, with the model's spec (same encoded features, same preprocessing, same label) and a
   released form that predicts that label's task — otherwise 422 — and ε in range. Nothing is
   spent;
2. one transaction: the queued job (kind ``evaluate``) and the ε charge on the *evaluation*
   dataset's ledger (δ = 0: every task's release is pure ε-DP; what each task releases is in
   :mod:`service.domain.models.evaluation_tasks`);
3. hand the job to the runner. The worker draws the noise; the result is stored as an
   ``evaluation`` row whose id is the job's id.

``dry_run`` quotes the cost and the remaining budget. ``Idempotency-Key`` returns the first
request's job, charged once. The record warns when the dataset is the one the model was
trained on (an in-sample estimate is optimistic).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.db.models import Dataset, Model
from service.db.models import Evaluation as EvaluationRow
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.catalog import (
    dataset_task,
    get_owned_dataset,
    read_design,
    require_live,
)
from service.domain.datasets.labels import LabelTask
from service.domain.errors import InvalidInputError, NotFoundError
from service.domain.ids import looks_like_id
from service.domain.jobs.charged import (
    DatasetCharge,
    JobDraft,
    Pricing,
    SubmittedJob,
    submit_charged_job,
)
from service.domain.jobs.lifecycle import ClaimedJob, JobContext, JobScheduler, Release
from service.domain.ledger import budgets
from service.domain.models.catalog import get_model
from service.domain.models.evaluation_tasks import check_model_task, epsilon_split, release
from service.domain.ranges import MAX_EPSILON, MIN_EPSILON
from service.domain.records.base import json_safe, software_version
from service.dp.analysis.evaluation import DEFAULT_BINS
from service.dp.analysis.work import evaluation_work
from service.dp.core.released import model_from_dict

__all__ = [
    "EVALUATION_KIND",
    "EvaluationPage",
    "EvaluationQuote",
    "get_evaluation",
    "list_evaluations",
    "quote_evaluation",
    "run_evaluation_job",
    "submit_evaluation",
]

EVALUATION_KIND = "evaluate"
MECHANISM = "private_evaluation"
IN_SAMPLE_WARNING = (
    "this dataset is the one the model was trained on: the estimate is in-sample and "
    "optimistic about accuracy on new data"
)


@dataclass(frozen=True, slots=True)
class EvaluationQuote:
    """What an evaluation would spend (a dry run)."""

    model_id: str
    dataset_id: str
    epsilon: float
    delta: float
    epsilon_split: dict[str, float]
    remaining_epsilon: float
    remaining_delta: float
    warnings: list[str]


@dataclass(frozen=True, slots=True)
class EvaluationPage:
    """One page of a model's evaluations."""

    items: Sequence[EvaluationRow]
    total: int


def _params(model_id: str, dataset_id: str, epsilon: float, labels: LabelTask) -> dict[str, Any]:
    params: dict[str, Any] = {
        "mechanism": MECHANISM,
        "model_id": model_id,
        "dataset_id": dataset_id,
        "epsilon": float(epsilon),
    }
    if labels.task == "binary":
        params["bins"] = DEFAULT_BINS
    else:
        params["task"] = labels.task
    return params


def _check_epsilon(epsilon: float) -> None:
    if not (MIN_EPSILON <= epsilon <= MAX_EPSILON):
        raise InvalidInputError(
            f"epsilon must be between {MIN_EPSILON:g} and {MAX_EPSILON:g}",
            errors=[{"loc": ["body", "epsilon"], "msg": "out of range"}],
        )


def _check_same_spec(model: Model, dataset: Dataset) -> LabelTask:
    """422 unless the dataset encodes the model's features the same way with the same label
    and the model predicts that label's task; the label's task."""
    label = dict(dataset.spec.get("label", {}))
    same = (
        list(model.feature_names) == list(dataset.feature_names)
        and dict(model.preprocessing) == dict(dataset.preprocessing)
        and dict(model.label) == label
    )
    if not same:
        raise InvalidInputError(
            "the dataset's spec differs from the model's (features, preprocessing or label); "
            "a model can only be evaluated on data described by the spec it was trained with",
            errors=[{"loc": ["body", "dataset_id"], "msg": "spec differs from the model's"}],
        )
    labels = dataset_task(dataset)
    check_model_task(dict(model.body), labels)
    return labels


def _warnings(model: Model, dataset_id: str) -> list[str]:
    return [IN_SAMPLE_WARNING] if model.dataset_id == dataset_id else []


def quote_evaluation(
    uow: UnitOfWork, *, model_id: str, dataset_id: str, epsilon: float, actor: Principal
) -> EvaluationQuote:
    """The dry run: the cost (ε, 0) and the remaining budget; spends nothing."""
    actor.site_or_not_found("model")
    _check_epsilon(epsilon)
    model = get_model(uow, model_id=model_id, actor=actor)
    with uow:
        dataset = require_live(
            get_owned_dataset(uow, dataset_id=dataset_id, actor=actor), use="evaluated on"
        )
        remaining_epsilon, remaining_delta = budgets.remaining(dataset)
    labels = _check_same_spec(model, dataset)
    return EvaluationQuote(
        model_id=model_id,
        dataset_id=dataset_id,
        epsilon=float(epsilon),
        delta=0.0,
        epsilon_split=epsilon_split(labels, epsilon),
        remaining_epsilon=remaining_epsilon,
        remaining_delta=remaining_delta,
        warnings=_warnings(model, dataset_id),
    )


def submit_evaluation(
    uow: UnitOfWork,
    *,
    model_id: str,
    dataset_id: str,
    epsilon: float,
    actor: Principal,
    runner: JobScheduler,
    idempotency_key: str | None = None,
    context: AuditContext | None = None,
) -> SubmittedJob:
    """Validate, charge ε to the dataset's ledger and enqueue (module docstring), through the
    one charged-job contract (:func:`service.domain.jobs.charged.submit_charged_job`)."""
    _check_epsilon(epsilon)
    model = get_model(uow, model_id=model_id, actor=actor)

    def draft(u: UnitOfWork) -> JobDraft:
        dataset = get_owned_dataset(u, dataset_id=dataset_id, actor=actor)
        labels = dataset_task(dataset)

        def price() -> Pricing:
            require_live(dataset, use="evaluated on")
            _check_same_spec(model, dataset)
            # scoring reads every row once per output (K scores for a multi-class model)
            outputs = labels.n_classes if labels.task == "multiclass" else 1
            return Pricing(
                mechanism=MECHANISM,
                charges=[DatasetCharge(dataset.id, dataset.owner_site_id, float(epsilon), 0.0)],
                audit_action="evaluation.submitted",
                audit_details={"dataset_id": dataset_id, "model_id": model_id, "epsilon": epsilon},
                work=evaluation_work(int(dataset.n_rows), int(dataset.n_features) * outputs),
            )

        return JobDraft(
            kind=EVALUATION_KIND,
            dataset_id=dataset.id,
            params=_params(model_id, dataset_id, epsilon, labels),
            price=price,
        )

    return submit_charged_job(
        uow,
        actor=actor,
        draft=draft,
        runner=runner,
        idempotency_key=idempotency_key,
        context=context,
    )


def run_evaluation_job(
    uow_factory: UnitOfWorkFactory, job: ClaimedJob, context: JobContext
) -> Release:
    """The worker: score the dataset with the model and release the ε-DP evaluation."""
    params = job.params
    row = job.live_dataset()
    with uow_factory() as uow:
        model = uow.models.get(str(params["model_id"]))
        if model is None:
            raise NotFoundError("model")
        body = dict(model.body)
        trained_on = model.dataset_id
    design = read_design(uow_factory, row)
    context.progress(0.1)
    seed = context.randomness.job_seed(job.id)
    epsilon = float(params["epsilon"])
    result = release(
        model_from_dict(body),
        design.X,
        design.y,
        labels=dataset_task(row),
        epsilon=epsilon,
        bins=int(params.get("bins", DEFAULT_BINS)),
        randbelow=None if seed is None else random.Random(seed).randrange,
        bootstrap_rng=np.random.default_rng(seed),
    )
    warnings = [IN_SAMPLE_WARNING] if trained_on == job.dataset_id else []
    record = {
        "kind": "evaluation",
        "verified": True,
        "guarantee": "differential_privacy",
        "statement": f"({epsilon:g}, 0)-differential privacy for one row of dataset "
        f"{row.name!r} ({row.id}), replace-one neighbours"
        + ("" if seed is None else " (test seed: not private in practice)"),
        "mechanism": MECHANISM,
        "epsilon": epsilon,
        "delta": 0.0,
        "epsilon_split": result.epsilon_split,
        **result.note,
        "dataset": {"id": row.id, "name": row.name},
        "randomness": context.randomness.describe(job.id),
        "warnings": warnings,
        "software_version": software_version(),
    }
    evaluation = EvaluationRow(
        id=job.id,
        owner_site_id=job.owner_site_id,
        model_id=str(params["model_id"]),
        dataset_id=row.id,
        epsilon=epsilon,
        result=json_safe(result.result),
        privacy=json_safe(record),
    )
    # What the release spent (the ε its noise was calibrated with), δ = 0.
    return Release(model=evaluation, spent={row.id: (result.spent, 0.0)})


def _visible(row: EvaluationRow | None, actor: Principal) -> EvaluationRow:
    if row is None or not actor.owns(row.owner_site_id):
        raise NotFoundError("evaluation")
    return row


def get_evaluation(uow: UnitOfWork, *, evaluation_id: str, actor: Principal) -> EvaluationRow:
    """An evaluation the caller's site ran; others are 404 (for the admin, all)."""
    if not looks_like_id(evaluation_id):
        raise NotFoundError("evaluation")
    with uow:
        return _visible(uow.evaluations.get(evaluation_id), actor)


def list_evaluations(
    uow: UnitOfWork, *, model_id: str, actor: Principal, limit: int, offset: int
) -> EvaluationPage:
    """The evaluations of a model the caller may read that its site ran, newest first."""
    get_model(uow, model_id=model_id, actor=actor)
    owner = actor.site_or_not_found("model")
    with uow:
        return EvaluationPage(
            items=uow.evaluations.list_for_model(
                model_id, owner_site_id=owner, limit=limit, offset=offset
            ),
            total=uow.evaluations.count_for_model(model_id, owner_site_id=owner),
        )
