"""Aggregations: the coordinator combines a study's contributed models (issue 5 item 3).

``average`` (seed 000, Alg. 4) is the (optionally weighted) average of the contributed
coefficient vectors, :func:`service.dp.aggregation.average_coefficients`. It reads no data, so
it is cheap: it runs inside the request and its job is stored already ``succeeded`` (kind
``aggregate``), naming a model (``source = 'aggregate'``) that every member of the study reads.

Privacy (DESIGN §2, §3): averaging released models is post-processing, so nothing new is
charged. The result's record lists every input model with the guarantee it carried, composes
the verified guarantees per dataset (parallel across datasets, sequential — ε and δ add — when
two inputs were fitted on the same dataset), labels an uploaded classifier's guarantee as the
uploader's declared claim, and, when any input has no DP guarantee, says plainly that the
average has none. Stacked models are not one weight vector: averaging them is a 422.

``feature`` and ``transfer`` fit a DP model on one of the coordinator's own datasets: they are
charged jobs (:func:`service.domain.jobs.charged.submit_charged_job`: the request is checked,
the dataset charged and the job queued in one transaction, ``Idempotency-Key`` honoured), and
the job runs on the job runner like a single-dataset fit (:func:`run_aggregation_job`,
registered in :mod:`service.jobs.worker`): progress, cancellation, recovery, the release guard
and the ledger rules are the same. :func:`quote_aggregation` is the dry run of all three.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from service.db.base import utcnow
from service.db.errors import IntegrityConflictError
from service.db.models import Dataset, Job, Model, Study, new_id
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain import audit
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.catalog import load_design
from service.domain.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
)
from service.domain.ids import check_idempotency_key, looks_like_id, refuse_duplicates
from service.domain.jobs.charged import (
    DatasetCharge,
    JobDraft,
    Pricing,
    SubmittedJob,
    replayed_job,
    submit_charged_job,
)
from service.domain.jobs.lifecycle import (
    ClaimedJob,
    JobContext,
    JobScheduler,
    JobView,
    Release,
    charged_amounts,
)
from service.domain.ledger import budgets
from service.domain.privacy_record import (
    NEIGHBOURING,
    RECORD_VERSION,
    UNVERIFIED_NOTE,
    charged_line,
    json_safe,
    software_version,
)
from service.domain.randomness import Randomness
from service.domain.ranges import MIN_EPSILON, check_calibration
from service.domain.studies.membership import StudyFacts, require_matching, visible_study
from service.dp import calibrate as dp_calibrate
from service.dp.aggregation import (
    FEATURE_MECHANISMS,
    META_FEATURE_KINDS,
    average_coefficients,
    feature_fit,
    normalised_weights,
)
from service.dp.base import Calibration, FitResult
from service.dp.models import META_FEATURES
from service.dp.preprocessing import CategoricalFeature, PreprocessingSpec
from service.dp.transfer import stacked_transfer_calibration, stacked_transfer_fit, transfer_fit

logger = logging.getLogger(__name__)

__all__ = [
    "AGGREGATION_METHODS",
    "PST_H_WITHIN_JOB",
    "AggregationQuote",
    "AggregationRequest",
    "FeatureRequest",
    "TransferRequest",
    "average",
    "average_privacy_record",
    "feature",
    "quote_aggregation",
    "run_aggregation_job",
    "transfer",
    "transfer_privacy_record",
]

AGGREGATION_METHODS = ("average", "feature", "transfer")


@dataclass(frozen=True, slots=True)
class AggregationRequest:
    """What the coordinator asked for."""

    method: str
    models: Sequence[str] | None = None
    weights: Sequence[float] | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class _Input:
    model: Model
    site_id: str
    contribution_id: str


def _select_inputs(uow: UnitOfWork, study: Study, requested: Sequence[str] | None) -> list[_Input]:
    contributed = {
        c.model_id: c
        for c in uow.studies.contributions(study.id)
        if c.kind == "model" and c.model_id is not None
    }
    if requested is None:
        ids = list(contributed)
        if not ids:
            raise InvalidInputError(
                "the study has no contributed models to aggregate",
                errors=[{"loc": ["body", "models"], "msg": "no contributed models"}],
            )
    else:
        ids = list(requested)
        refuse_duplicates(ids, field="models", what="model")
        foreign = [i for i, m in enumerate(ids) if m not in contributed]
        if foreign:
            raise InvalidInputError(
                "only models contributed to this study can be aggregated; not contributed: "
                + ", ".join(repr(ids[i]) for i in foreign),
                errors=[
                    {"loc": ["body", "models", i], "msg": "not a contribution of this study"}
                    for i in foreign
                ],
            )
    inputs: list[_Input] = []
    for model_id in ids:
        contribution = contributed[model_id]
        model = uow.models.get(model_id)
        if model is None:  # pragma: no cover - the foreign key keeps contributed models
            raise InvalidInputError(f"model {model_id!r} no longer exists")
        inputs.append(
            _Input(model=model, site_id=contribution.site_id, contribution_id=contribution.id)
        )
    return inputs


def _mark_used(uow: UnitOfWork, inputs: Sequence[_Input], at: datetime) -> None:
    """Mark the inputs' contributions used, or 409 when one was withdrawn meanwhile."""
    if uow.studies.mark_used([i.contribution_id for i in inputs], at=at) != len(inputs):
        raise ConflictError("a contribution was withdrawn while the aggregation was prepared")


def _input_entry(item: _Input, weight: float) -> dict[str, Any]:
    """One input model as the aggregated record lists it (no calibration, no row counts)."""
    record = dict(item.model.privacy or {})
    entry: dict[str, Any] = {
        "model_id": item.model.id,
        "site_id": item.site_id,
        "source": item.model.source,
        "weight": weight,
        "guarantee": record.get("guarantee", "none"),
        "verified": bool(record.get("verified")),
        "mechanism": record.get("mechanism"),
        "epsilon": record.get("epsilon"),
        "delta": record.get("delta"),
    }
    if item.model.source == "upload":
        entry["claim"] = record.get("claim")
        entry["note"] = UNVERIFIED_NOTE
    datasets = [
        {"id": d.get("id"), "epsilon": d.get("epsilon"), "delta": d.get("delta")}
        for d in record.get("datasets") or []
        if isinstance(d, Mapping)
    ]
    entry["datasets"] = datasets
    # The input's own statement names its dataset; other members see ids only.
    if item.model.source == "upload":
        entry["statement"] = record.get("statement")
    elif entry["guarantee"] == "differential_privacy":
        entry["statement"] = "; ".join(
            f"({d['epsilon']:g}, {d['delta']:g})-differential privacy for one row of dataset "
            f"{d['id']}"
            for d in datasets
        )
    else:
        entry["statement"] = "no differential privacy"
    randomness = record.get("randomness")
    if isinstance(randomness, Mapping) and randomness.get("source") == "test_seed":
        entry["randomness"] = dict(randomness)
    return entry


def average_privacy_record(
    inputs: Sequence[Mapping[str, Any]],
    *,
    job_id: str,
    study_id: str,
    version: str | None = None,
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """The record of an averaged model from its input entries (see the module doc)."""
    no_dp = [e for e in inputs if e["guarantee"] not in ("differential_privacy", "declared")]
    declared = [e for e in inputs if e["guarantee"] == "declared" or not e["verified"]]
    declared = [e for e in declared if e not in no_dp]
    per_dataset = _compose_sources(inputs)
    datasets: list[dict[str, Any]] = list(per_dataset.values())
    datasets.extend(_unmetered_entries(inputs, no_dp))
    if no_dp:
        guarantee = "none"
        verified = False
        epsilon = delta = None
        statement = (
            "no differential privacy: input model(s) "
            + ", ".join(e["model_id"] for e in no_dp)
            + " carry no DP guarantee, so the average protects nothing for the data they "
            "were trained on (averaging adds no noise)"
        )
    elif declared:
        guarantee = "declared"
        verified = False
        epsilon = delta = None
        statement = (
            "not verified: input model(s) "
            + ", ".join(e["model_id"] for e in declared)
            + f" carry only a guarantee {UNVERIFIED_NOTE}; the average inherits each input's "
            "guarantee for its own data by post-processing, and no more"
        )
    else:
        guarantee = "differential_privacy"
        verified = True
        epsilon = max(d["epsilon"] for d in per_dataset.values())
        delta = max(d["delta"] for d in per_dataset.values())
        statement = (
            "per dataset, the guarantee its model(s) carried (post-processing): "
            + "; ".join(
                f"({d['epsilon']:g}, {d['delta']:g})-differential privacy for one row of "
                f"dataset {d['id']}"
                for d in per_dataset.values()
            )
        )
    record: dict[str, Any] = {
        "version": RECORD_VERSION,
        "kind": "aggregate",
        "method": "average",
        "verified": verified,
        "guarantee": guarantee,
        "statement": statement,
        "mechanism": "average",
        "epsilon": epsilon,
        "delta": delta,
        "unit": {
            "record": "row",
            "neighbouring": NEIGHBOURING,
            "description": "one row of each contributing dataset",
        },
        "datasets": datasets,
        "inputs": list(inputs),
        "charged": "nothing: averaging released models is post-processing and reads no data",
        "composition": {
            "within_job": "post-processing of the input models (seed 000, Alg. 4); no noise",
            "across_datasets": "parallel: each dataset keeps the guarantee of the model(s) "
            "fitted on it; ε and δ add over models fitted on the same dataset",
            "across_jobs": "the inputs' charges stay on their datasets' ledgers",
        },
        "study_id": study_id,
        "software": {"name": "privfit", "version": version or software_version()},
        "job_id": job_id,
    }
    if created_at is not None:
        record["created_at"] = created_at.isoformat()
    return json_safe(record)  # type: ignore[no-any-return]


def _average(inputs: Sequence[_Input], weights: Sequence[float] | None) -> tuple[Any, Any]:
    stacked = [i.model.id for i in inputs if (i.model.body or {}).get("kind") != "linear"]
    if stacked:
        raise InvalidInputError(
            "only linear models can be averaged; stacked (two-level) models have no single "
            "weight vector: " + ", ".join(map(repr, stacked)),
            errors=[{"loc": ["body", "models"], "msg": "stacked models cannot be averaged"}],
        )
    try:
        pi = normalised_weights(len(inputs), weights)
        coef = average_coefficients([i.model.body["coef"] for i in inputs], weights)
    except ValueError as exc:
        raise InvalidInputError(
            f"cannot average: {exc}", errors=[{"loc": ["body", "weights"], "msg": str(exc)}]
        ) from exc
    return pi, coef


def average(
    uow: UnitOfWork,
    *,
    study_id: str,
    request: AggregationRequest,
    actor: Principal,
    context: AuditContext,
    idempotency_key: str | None = None,
) -> SubmittedJob:
    """Average the study's contributed models (the one uncharged aggregation method: it reads
    no data, so it is post-processing of released models) for the study's coordinator;
    returns its job, finished in the same transaction that created it.

    404 for a study the caller is not in, 403 for a member that is not the coordinator, 422
    for an unknown method, no or foreign models, bad weights or stacked models. A retry with
    the same ``Idempotency-Key`` gets the first request's job (one result, not two).
    """
    site_id = actor.require_site()
    check_idempotency_key(idempotency_key)
    if request.method != "average":
        raise InvalidInputError(f"unknown aggregation method {request.method!r}")
    try:
        with uow:
            study = visible_study(uow, study_id, actor)
            if study.coordinator_site_id != site_id:
                raise PermissionDeniedError("only the study's coordinator can run aggregations")
            inputs = _select_inputs(uow, study, request.models)
            pi, coef = _average(inputs, request.weights)
            params = json_safe(
                {
                    "method": request.method,
                    "study_id": study.id,
                    "models": [i.model.id for i in inputs],
                    "weights": [float(w) for w in pi],
                }
            )
            if idempotency_key is not None:
                found = replayed_job(
                    uow,
                    owner=site_id,
                    key=idempotency_key,
                    kind="aggregate",
                    dataset_id=None,
                    params=params,
                )
                if found is not None:
                    return SubmittedJob(view=JobView(found, ()), created=False)
            now = utcnow()
            job_id, model_id = new_id(), new_id()
            entries = [_input_entry(item, float(w)) for item, w in zip(inputs, pi, strict=True)]
            record = average_privacy_record(entries, job_id=job_id, study_id=study.id)
            losses = {i.model.loss for i in inputs}
            job = uow.jobs.add(
                Job(
                    id=job_id,
                    owner_site_id=site_id,
                    kind="aggregate",
                    dataset_id=None,
                    params=params,
                    status="succeeded",
                    progress=1.0,
                    attempt=1,
                    model_id=model_id,
                    idempotency_key=idempotency_key,
                    created_at=now,
                    started_at=now,
                    finished_at=now,
                )
            )
            uow.models.add(
                StudyFacts.of(study).model(
                    model_id=model_id,
                    owner_site_id=site_id,
                    job_id=job_id,
                    name=request.name,
                    source="aggregate",
                    mechanism=request.method,
                    loss=losses.pop() if len(losses) == 1 else "other",
                    body={"kind": "linear", "coef": [float(v) for v in coef]},
                    privacy=record,
                )
            )
            _mark_used(uow, inputs, now)
            audit.record(
                uow,
                action="study.aggregated",
                actor=actor,
                context=context,
                subject_type="study",
                subject_id=study.id,
                details={"job_id": job_id, "model_id": model_id, "method": request.method},
            )
            uow.commit()
            return SubmittedJob(view=JobView(job, ()), created=True)  # nothing charged
    except IntegrityConflictError:
        if idempotency_key is None:
            raise
        with uow:  # a concurrent request with the same key committed first
            found = uow.jobs.get_by_idempotency_key(
                owner_site_id=site_id, idempotency_key=idempotency_key
            )
            if found is None:
                raise ConflictError(
                    "a request with this Idempotency-Key is being processed; retry"
                ) from None
            return SubmittedJob(view=JobView(found, ()), created=False)


# --- transfer ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TransferRequest:
    """Hypothesis transfer onto the coordinator's own target dataset; with ``feature_groups``
    (lists of the study's encoded feature names, or of categorical column names standing for
    their one-hot block) and optional public ``importance`` weights it is PST-H (seed 003)."""

    target_dataset_id: str
    epsilon: float
    transfer_strength: float
    source_models: Sequence[str] | None = None
    regularization: float = 0.01
    loss: str = "logistic"
    name: str | None = None
    feature_groups: Sequence[Sequence[str]] | None = None
    importance: Sequence[float] | None = None
    #: PST-H's meta-features (``sigmoid``, the default, or ``centered_sigmoid``).
    meta_features: str | None = None


#: Calibration numbers safe to show every member: none of them reveals the target's row count.
_PUBLIC_CALIBRATION_KEYS = (
    "loss",
    "regularization",
    "transfer_strength",
    "c",
    "branch",
    "meta_features",
    "meta_mechanism",
    "meta_scale",
    "n_site_models",
    # PST-H: public choices of the caller and numbers from ε, q_k and the source models only
    "variant",
    "feature_groups",
    "feature_group_names",
    "unused_features",
    "importance",
    "n_models",
    "low_level_epsilon",
    "high_level_epsilon",
    "high_level_fraction",
    "high_level_intercept",
    "high_level_regularization",
    "calibration_strong_convexity",
    "centre_norms",
)


def _compose_sources(
    entries: Sequence[Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Per dataset, the verified DP cost of the entries' models: sequential composition
    within a dataset (ε and δ add), one slot per dataset (parallel across datasets)."""
    per_dataset: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if entry["guarantee"] != "differential_privacy" or not entry["verified"]:
            continue
        for d in entry["datasets"]:
            slot = per_dataset.setdefault(
                str(d["id"]),
                {
                    "id": d["id"],
                    "site_id": entry["site_id"],
                    "epsilon": 0.0,
                    "delta": 0.0,
                    "models": [],
                    "guarantee": "differential_privacy",
                    "verified": True,
                },
            )
            slot["epsilon"] += float(d["epsilon"])
            slot["delta"] += float(d["delta"])
            slot["models"].append(entry["model_id"])
    return per_dataset


def transfer_privacy_record(
    sources: Sequence[Mapping[str, Any]],
    *,
    target_id: str,
    target_site_id: str,
    epsilon: float,
    delta: float,
    calibration: Mapping[str, Any],
    randomness: Randomness,
    job_id: str,
    study_id: str,
    charged: Mapping[str, tuple[float, float]],
    method: str = "transfer",
    role: str = "target",
    base_mechanism: str = "objective_perturbation",
    within_job: str | None = None,
    version: str | None = None,
) -> dict[str, Any]:
    """The record of a transfer (or feature) fit: DP for the target (or holdout) dataset by
    this job, composed
    sequentially with any source model fitted on the same dataset; the sources' own
    guarantees for their datasets; a plain "no DP" when a source has none. ``epsilon`` and
    ``delta`` are what the run spent on the target; ``charged`` is the ledger's charge for the
    job (its "charged" figures come from there, never from the job's params)."""
    charged_epsilon, charged_delta = charged.get(target_id, (0.0, 0.0))
    per_dataset = _compose_sources(sources)
    target = per_dataset.pop(target_id, None)
    target_slot: dict[str, Any] = {
        "id": target_id,
        "site_id": target_site_id,
        "epsilon": epsilon + (target["epsilon"] if target else 0.0),
        "delta": delta + (target["delta"] if target else 0.0),
        "charged_by_this_job": {"epsilon": charged_epsilon, "delta": charged_delta},
        "models": list(target["models"]) if target else [],
        "guarantee": "differential_privacy",
        "verified": True,
        "role": role,
    }
    datasets: list[dict[str, Any]] = [target_slot, *per_dataset.values()]
    no_dp = [e for e in sources if e["guarantee"] not in ("differential_privacy", "declared")]
    declared = [e for e in sources if e not in no_dp and not e["verified"]]
    datasets.extend(_unmetered_entries(sources, no_dp))
    target_text = (
        f"({target_slot['epsilon']:g}, {target_slot['delta']:g})-differential privacy for one "
        f"row of the {role} dataset {target_id}"
        + ("" if randomness.seed is None else " (test seed: not private in practice)")
    )
    if no_dp:
        guarantee, verified, eps, dlt = "none", False, None, None
        statement = (
            f"{target_text}; but source model(s) "
            + ", ".join(e["model_id"] for e in no_dp)
            + " carry no DP guarantee, so the result protects nothing for the data they were "
            "trained on"
        )
    elif declared:
        guarantee, verified, eps, dlt = "declared", False, None, None
        statement = (
            f"{target_text}; source model(s) "
            + ", ".join(e["model_id"] for e in declared)
            + f" carry only a guarantee {UNVERIFIED_NOTE}, inherited by post-processing"
        )
    else:
        guarantee, verified = "differential_privacy", True
        eps = max(float(d["epsilon"]) for d in datasets)
        dlt = max(float(d["delta"]) for d in datasets)
        statement = target_text + "".join(
            f"; ({d['epsilon']:g}, {d['delta']:g})-differential privacy for one row of "
            f"source dataset {d['id']} (post-processing of its model)"
            for d in per_dataset.values()
        )
    record: dict[str, Any] = {
        "version": RECORD_VERSION,
        "kind": "aggregate",
        "method": method,
        "verified": verified,
        "guarantee": guarantee,
        "statement": statement,
        "mechanism": method,
        "epsilon": eps,
        "delta": dlt,
        "unit": {
            "record": "row",
            "neighbouring": NEIGHBOURING,
            "description": f"one row of the {role} dataset, and of each source model's dataset",
        },
        "datasets": datasets,
        "inputs": list(sources),
        "calibration": {
            **{k: calibration[k] for k in _PUBLIC_CALIBRATION_KEYS if k in calibration},
            "base_mechanism": base_mechanism,
            "note": f"numbers that depend on the {role} dataset's size are not shown to the "
            "study's other members",
        },
        "charged": charged_line(charged, role=role),
        "composition": {
            "within_job": within_job
            or "objective perturbation on the target dataset with the regulariser "
            "(η/2)‖w − w₀‖² centred on the average w₀ of the source models (public, "
            "post-processed); the same ε bound holds (see service.dp.transfer)",
            "across_datasets": "parallel across datasets; sequential (ε and δ add) on the "
            f"{role} dataset when a source model was fitted on it",
            "across_jobs": f"this job's (ε, δ) was charged to the {role} dataset's ledger and "
            "committed before any noise was drawn",
        },
        "randomness": randomness.describe(job_id),
        "study_id": study_id,
        "software": {"name": "privfit", "version": version or software_version()},
        "job_id": job_id,
    }
    return json_safe(record)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class FeatureRequest:
    """The feature method on the coordinator's own holdout dataset."""

    holdout_dataset_id: str
    epsilon: float
    delta: float = 0.0
    mechanism: str = "objective_perturbation"
    regularization: float = 0.01
    meta_features: str = "linear"
    source_models: Sequence[str] | None = None
    loss: str = "logistic"
    name: str | None = None


FitCompute = Callable[[Any, Any, list[Any], np.random.Generator | None], FitResult]


@dataclass(frozen=True, slots=True)
class _ChargedFit:
    """A DP fit on one of the coordinator's datasets over the study's source models, rebuilt
    from the job's stored parameters (so the worker that runs it needs nothing else)."""

    method: str
    role: str
    field: str
    base_mechanism: str
    within_job: str
    #: (n, d, number of sources) → the calibration; ValueError for bad parameters.
    calibrate: Callable[[int, int, int], Calibration]
    #: (X, y, source coefficient vectors, rng) → the fit.
    compute: FitCompute


#: What the record says a PST-H job does and costs (DESIGN §3; service.dp.transfer).
PST_H_WITHIN_JOB = (
    "PST-H (seed 003 Alg. 4, target side): the target's rows are split at random, "
    "independently of the data, into a low-level and a high-level part; low-level model k is "
    "objective perturbation on feature group k's columns with ε_k = q_k·ε (calibration."
    "low_level_epsilon) and the regulariser (η/2)‖w − u_k‖² centred on the average of the "
    "source models restricted to group k (public, post-processed; calibrated with λ only, "
    "which is conservative); the K low-level models read the same rows, so their costs add "
    "(Σ_k ε_k = ε); the high level is objective perturbation with ε on the meta-features of "
    "the other rows (disjoint: parallel). The true cost of everything fitted on the target "
    "rows is therefore ε, and that is what the target dataset was charged. Nothing is fitted "
    "on the source data: each source dataset keeps the cost its models were charged (added "
    "up when several source models come from one dataset), not seed 003's per-group ε_src "
    "(its K source models on the same rows cost K·ε_src)"
)


def _resolve_groups(
    feature_names: Sequence[str],
    preprocessing: Mapping[str, Any],
    groups: Sequence[Sequence[str]] | None,
    importance: Sequence[float] | None,
) -> tuple[list[list[int]], list[list[str]], list[str], list[float] | None]:
    """Column indices, encoded names and unused names of the groups; normalised importance.

    A group entry is an encoded feature name of the study (``age``, ``color=red``,
    ``intercept``) or a categorical column name, which stands for its whole one-hot block.
    Groups must be non-empty and disjoint. The ``intercept`` column is a column like any
    other: in a group it gives that group's low-level model a bias; in no group it is unused
    (the high level has its own intercept). Importance weights are public, ≥ 0, one per group,
    not all zero; a zero weight is refused (the group would get no budget: leave it out).
    Any breach is an :class:`InvalidInputError` naming it (only names, never data)."""
    if groups is None:
        if importance is not None:
            raise InvalidInputError(
                "importance weights need feature_groups (one weight per group)",
                errors=[{"loc": ["body", "importance"], "msg": "needs feature_groups"}],
            )
        return [], [], [], None
    index = {name: i for i, name in enumerate(feature_names)}
    blocks: dict[str, list[str]] = {}
    spec = PreprocessingSpec.from_dict(preprocessing)
    if spec.projection is None:
        blocks = {
            f.column: list(f.names) for f in spec.features if isinstance(f, CategoricalFeature)
        }
    errors: list[dict[str, Any]] = []
    owner: dict[int, int] = {}
    resolved: list[list[int]] = []
    for k, group in enumerate(groups):
        if not group:
            errors.append({"loc": ["body", "feature_groups", k], "msg": f"group {k} is empty"})
        cols: list[int] = []
        for j, entry in enumerate(group):
            loc = ["body", "feature_groups", k, j]
            if entry in index:
                expanded = [entry]
            elif entry in blocks:
                expanded = blocks[entry]
            else:
                errors.append({"loc": loc, "msg": f"unknown feature {entry!r}"})
                continue
            for name in expanded:
                i = index[name]
                if i in owner:
                    where = "twice in group" if owner[i] == k else f"also in group {owner[i]} of"
                    errors.append(
                        {
                            "loc": loc,
                            "msg": f"feature {name!r} is {where} feature_groups: the groups "
                            "must be disjoint",
                        }
                    )
                    continue
                owner[i] = k
                cols.append(i)
        resolved.append(cols)
    if errors:
        raise InvalidInputError(
            "bad feature_groups: " + "; ".join(e["msg"] for e in errors[:10]),
            errors=errors,
        )
    named = [[feature_names[i] for i in cols] for cols in resolved]
    unused = [name for i, name in enumerate(feature_names) if i not in owner]
    if importance is None:
        return resolved, named, unused, None
    q = [float(v) for v in importance]
    loc = ["body", "importance"]
    if len(q) != len(resolved):
        raise InvalidInputError(
            f"importance needs one weight per feature group ({len(resolved)}), got {len(q)}",
            errors=[{"loc": loc, "msg": "one weight per feature group"}],
        )
    bad = [k for k, v in enumerate(q) if not math.isfinite(v) or v < 0.0]
    if bad:
        raise InvalidInputError(
            "importance weights must be finite and ≥ 0",
            errors=[{"loc": [*loc, k], "msg": "must be finite and ≥ 0"} for k in bad],
        )
    zero = [k for k, v in enumerate(q) if v == 0.0]
    if zero:
        raise InvalidInputError(
            "a feature group with importance 0 would get no privacy budget; leave it out of "
            "feature_groups instead (groups " + ", ".join(map(str, zero)) + ")",
            errors=[{"loc": [*loc, k], "msg": "importance 0"} for k in zero],
        )
    # q / max q first: the sum of weights near the largest double would overflow.
    largest = max(q)
    scaled = [v / largest for v in q]
    total = math.fsum(scaled)
    return resolved, named, unused, [v / total for v in scaled]


def _check_group_budgets(importance: Sequence[float] | None, n_groups: int, epsilon: float) -> None:
    """Refuse (422, before any charge) importance weights so unequal that a group's share
    q_k·ε falls below the smallest documented ε (MIN_EPSILON): its noise scale ∝ 1/(q_k·ε)
    would overflow, or the share underflow to zero, while fitting after the charge."""
    shares = importance if importance is not None else [1.0 / max(n_groups, 1)] * n_groups
    small = [k for k, q in enumerate(shares) if not q * epsilon >= MIN_EPSILON]
    if small:
        raise InvalidInputError(
            f"each feature group's share q_k·ε of ε must be at least {MIN_EPSILON:g}; groups "
            + ", ".join(map(str, small))
            + " get less: use more even importance weights or a larger ε",
            errors=[
                {"loc": ["body", "importance", k], "msg": "share of ε below the minimum"}
                for k in small
            ],
        )


def _transfer_spec(p: Mapping[str, Any]) -> _ChargedFit:
    if p.get("feature_groups"):
        return _pst_h_spec(p)

    def calibrate(n: int, d: int, _k: int) -> Calibration:
        return dp_calibrate(
            "objective_perturbation",
            n=n,
            d=d,
            epsilon=float(p["epsilon"]),
            delta=0.0,
            loss=str(p["loss"]),
            regularization=float(p["regularization"]),
        )

    def compute(X: Any, y: Any, sources: list[Any], rng: np.random.Generator | None) -> FitResult:
        return transfer_fit(
            X,
            y,
            average_coefficients(sources),  # w₀: the equal-weight average of the sources
            epsilon=float(p["epsilon"]),
            transfer_strength=float(p["transfer_strength"]),
            regularization=float(p["regularization"]),
            loss=str(p["loss"]),
            rng=rng,
        )

    return _ChargedFit(
        method="transfer",
        role="target",
        field="target_dataset_id",
        base_mechanism="objective_perturbation",
        within_job="objective perturbation on the target dataset with the regulariser "
        "(η/2)‖w − w₀‖² centred on the average w₀ of the source models (public, "
        "post-processed); the same ε bound holds (see service.dp.transfer)",
        calibrate=calibrate,
        compute=compute,
    )


def _pst_h_spec(p: Mapping[str, Any]) -> _ChargedFit:
    """``transfer`` with feature groups: PST-H on the target (service.dp.transfer)."""
    groups = [[int(j) for j in g] for g in p["feature_groups"]]
    importance = None if p.get("importance") is None else [float(v) for v in p["importance"]]
    meta = str(p.get("meta_features") or "sigmoid")
    public = {
        "feature_group_names": [list(g) for g in p.get("feature_group_names") or []],
        "unused_features": list(p.get("unused_features") or []),
    }

    def calibrate(n: int, d: int, _k: int) -> Calibration:
        return stacked_transfer_calibration(
            n,
            d,
            feature_groups=groups,
            importance=importance,
            epsilon=float(p["epsilon"]),
            transfer_strength=float(p["transfer_strength"]),
            regularization=float(p["regularization"]),
            loss=str(p["loss"]),
            meta_features=meta,
        )

    def compute(X: Any, y: Any, sources: list[Any], rng: np.random.Generator | None) -> FitResult:
        result = stacked_transfer_fit(
            X,
            y,
            average_coefficients(sources),  # w₀: the equal-weight average of the sources
            feature_groups=groups,
            importance=importance,
            epsilon=float(p["epsilon"]),
            transfer_strength=float(p["transfer_strength"]),
            regularization=float(p["regularization"]),
            loss=str(p["loss"]),
            meta_features=meta,
            rng=rng,
        )
        return replace(result, details={**result.details, **public})

    return _ChargedFit(
        method="transfer",
        role="target",
        field="target_dataset_id",
        base_mechanism="stacking_features",
        within_job=PST_H_WITHIN_JOB,
        calibrate=calibrate,
        compute=compute,
    )


def _feature_spec(p: Mapping[str, Any]) -> _ChargedFit:
    mechanism, meta = str(p["mechanism"]), str(p["meta_features"])

    def calibrate(n: int, _d: int, k: int) -> Calibration:
        return dp_calibrate(
            mechanism,
            n=n,
            d=k if meta == "linear" else k + 1,
            epsilon=float(p["epsilon"]),
            delta=float(p["delta"]),
            loss=str(p["loss"]),
            regularization=float(p["regularization"]),
        )

    def compute(X: Any, y: Any, sources: list[Any], rng: np.random.Generator | None) -> FitResult:
        return feature_fit(
            X,
            y,
            sources,
            meta=meta,
            mechanism=mechanism,
            epsilon=float(p["epsilon"]),
            delta=float(p["delta"]),
            loss=str(p["loss"]),
            regularization=float(p["regularization"]),
            rng=rng,
        )

    return _ChargedFit(
        method="feature",
        role="holdout",
        field="holdout_dataset_id",
        base_mechanism=mechanism,
        within_job=f"{mechanism} on the holdout rows mapped through the site models "
        f"({meta} meta-features, scaled into the unit ball by a factor from the public site "
        "models only); the site models are post-processed (see service.dp.aggregation)",
        calibrate=calibrate,
        compute=compute,
    )


_CHARGED_METHODS: Mapping[str, Callable[[Mapping[str, Any]], _ChargedFit]] = {
    "transfer": _transfer_spec,
    "feature": _feature_spec,
}


def _charged_draft(
    study_id: str,
    spec: _ChargedFit,
    dataset_id: str,
    source_models: Sequence[str] | None,
    params: Mapping[str, Any],
    actor: Principal,
) -> Callable[[UnitOfWork], JobDraft]:
    """The job of a charged aggregation (see :func:`transfer`): the coordinator, the source
    models, its own dataset whose spec matches the study's; priced by ``spec``'s calibration
    on the dataset's public n and d, charged to that dataset."""

    def draft(uow: UnitOfWork) -> JobDraft:
        site_id = actor.require_site()
        study = visible_study(uow, study_id, actor)
        if study.coordinator_site_id != site_id:
            raise PermissionDeniedError("only the study's coordinator can run aggregations")
        inputs = _select_inputs(uow, study, source_models)
        _average(inputs, None)  # refuses stacked (non-linear) sources
        dataset = uow.datasets.get(dataset_id) if looks_like_id(dataset_id) else None
        if dataset is None or dataset.owner_site_id != site_id or dataset.deleted_at is not None:
            raise NotFoundError("dataset")
        require_matching(
            study,
            dataset.preprocessing,
            dict(dataset.spec.get("label") or {}),
            f"{spec.role} dataset",
            field=spec.field,
        )

        def price() -> Pricing:
            calibration = _calibrate_charged(spec, dataset, len(inputs))
            return Pricing(
                mechanism=spec.method,
                charges=[
                    DatasetCharge(
                        dataset_id=dataset.id,
                        owner_site_id=site_id,
                        epsilon=calibration.epsilon,
                        delta=calibration.delta,
                    )
                ],
                audit_action="study.aggregated",
                audit_subject=("study", study.id),
                audit_details={"method": spec.method, "dataset_id": dataset.id},
                used_contributions=[i.contribution_id for i in inputs],
                calibration=calibration,
            )

        return JobDraft(
            kind="aggregate",
            dataset_id=dataset.id,
            params={
                **params,
                "method": spec.method,
                "study_id": study.id,
                "source_models": [i.model.id for i in inputs],
                spec.field: dataset.id,
            },
            price=price,
        )

    return draft


def _calibrate_charged(spec: _ChargedFit, dataset: Dataset, k: int) -> Calibration:
    """``spec``'s calibration on the dataset's public size; 422 for parameters it refuses."""
    try:
        calibration = spec.calibrate(max(int(dataset.n_rows), 1), int(dataset.n_features), k)
    except (ValueError, ArithmeticError, MemoryError) as exc:
        raise InvalidInputError(
            f"invalid {spec.method} parameters: {exc}",
            errors=[{"loc": ["body"], "msg": str(exc)}],
        ) from exc
    check_calibration(
        epsilon=calibration.epsilon,
        delta=calibration.delta,
        details=calibration.details,
        noise_norm=calibration.expected_noise_norm,
    )
    return calibration


def run_aggregation_job(
    uow_factory: UnitOfWorkFactory, job: ClaimedJob, context: JobContext
) -> Release:
    """The worker's half of ``feature`` and ``transfer``: read the source models and the
    coordinator's dataset, fit, and return the model with its privacy record. Spent: the
    (ε, δ) the fit reports on the coordinator's dataset (the sources are post-processed
    models: reading them spends nothing)."""
    params = job.params
    spec = _CHARGED_METHODS[str(params["method"])](params)
    dataset_id = str(params[spec.field])
    with uow_factory() as uow:
        study = uow.studies.get(str(params["study_id"]))
        dataset = uow.datasets.get(dataset_id)
        if study is None or dataset is None or dataset.deleted_at is not None:
            raise NotFoundError("dataset")
        contributed = {
            c.model_id: c.site_id
            for c in uow.studies.contributions(study.id)
            if c.kind == "model" and c.model_id is not None
        }
        inputs: list[_Input] = []
        for model_id in params["source_models"]:
            model = uow.models.get(str(model_id))
            if model is None or model_id not in contributed:
                raise LookupError("a source model of the aggregation is gone")
            inputs.append(_Input(model=model, site_id=contributed[model_id], contribution_id=""))
        sources = [list(i.model.body["coef"]) for i in inputs]
        entries = [_input_entry(item, 1.0 / len(inputs)) for item in inputs]
        target_site = dataset.owner_site_id
        facts = StudyFacts.of(study)
    context.progress(0.0)
    X, y = load_design(uow_factory, dataset_id)
    result = spec.compute(X, y, sources, context.randomness.generator(job.id))
    record = transfer_privacy_record(
        entries,
        target_id=dataset_id,
        target_site_id=target_site,
        epsilon=result.epsilon,
        delta=result.delta,
        charged=charged_amounts(job),
        calibration=result.details,
        randomness=context.randomness,
        job_id=job.id,
        study_id=str(params["study_id"]),
        method=spec.method,
        role=spec.role,
        base_mechanism=spec.base_mechanism,
        within_job=spec.within_job,
    )
    model = facts.model(
        owner_site_id=job.owner_site_id,
        job_id=job.id,
        name=params.get("name"),
        source="aggregate",
        mechanism=spec.method,
        loss=str(params["loss"]),
        body=json_safe(result.model.to_dict()),
        privacy=record,
        dataset_id=dataset_id,
    )
    return Release(model=model, spent={dataset_id: (float(result.epsilon), float(result.delta))})


def transfer(
    uow: UnitOfWork,
    *,
    study_id: str,
    request: TransferRequest,
    actor: Principal,
    context: AuditContext,
    runner: JobScheduler,
    idempotency_key: str | None = None,
) -> SubmittedJob:
    """Hypothesis transfer for the study's coordinator; returns the queued job (a charged job:
    :func:`service.domain.jobs.charged.submit_charged_job`, ``Idempotency-Key`` included).

    Everything that needs no data is checked before anything is spent: 404 for a study the
    caller is not in or a target dataset it does not own, 403 for a member that is not the
    coordinator, 422 for foreign or stacked source models, a target whose spec differs from the
    study's, or bad parameters; 409 when the target's budget cannot cover ε. Then the charge
    and the queued job are committed together, before any noise is drawn, and the job goes to
    the runner (:func:`run_aggregation_job`); a failure after the charge leaves the budget
    spent (DESIGN §2), a cancel while queued refunds it.

    With ``feature_groups`` the fit is PST-H (:func:`_resolve_groups` for the rules; bad
    groups or importance weights are 422 before anything is charged); ε is still the whole
    cost charged to the target (:data:`PST_H_WITHIN_JOB`).
    """
    return submit_charged_job(
        uow,
        actor=actor,
        draft=_transfer_draft(uow, study_id, request, actor),
        runner=runner,
        idempotency_key=idempotency_key,
        context=context,
    )


def _transfer_draft(
    uow: UnitOfWork, study_id: str, request: TransferRequest, actor: Principal
) -> Callable[[UnitOfWork], JobDraft]:
    """:func:`transfer`'s job: the parameters (PST-H's groups resolved on the study's public
    features) and its :func:`_charged_draft`."""
    params: dict[str, Any] = {
        "epsilon": request.epsilon,
        "delta": 0.0,
        "transfer_strength": request.transfer_strength,
        "regularization": request.regularization,
        "loss": request.loss,
        "name": request.name,
    }
    if request.meta_features is not None and request.feature_groups is None:
        raise InvalidInputError(
            "meta_features needs feature_groups (plain transfer has no meta level)",
            errors=[{"loc": ["body", "meta_features"], "msg": "needs feature_groups"}],
        )
    if request.meta_features is not None and request.meta_features not in META_FEATURES:
        raise InvalidInputError(f"meta_features must be one of {', '.join(META_FEATURES)}")
    if request.feature_groups is not None or request.importance is not None:
        site_id = actor.require_site()
        with uow:
            study = visible_study(uow, study_id, actor)
            if study.coordinator_site_id != site_id:
                raise PermissionDeniedError("only the study's coordinator can run aggregations")
            feature_names = list(study.feature_names)
            preprocessing = dict(study.preprocessing)
        groups, named, unused, importance = _resolve_groups(
            feature_names, preprocessing, request.feature_groups, request.importance
        )
        params.update(
            feature_groups=groups,
            feature_group_names=named,
            unused_features=unused,
            importance=importance,
            meta_features=request.meta_features or "sigmoid",
        )
        _check_group_budgets(importance, len(groups), request.epsilon)
    return _charged_draft(
        study_id,
        _transfer_spec(params),
        request.target_dataset_id,
        request.source_models,
        params,
        actor,
    )


def feature(
    uow: UnitOfWork,
    *,
    study_id: str,
    request: FeatureRequest,
    actor: Principal,
    context: AuditContext,
    runner: JobScheduler,
    idempotency_key: str | None = None,
) -> SubmittedJob:
    """The feature method (seed 000 Alg. 5) for the study's coordinator: a DP meta-level fit
    on its own holdout dataset, charged to it; same checks, ledger order and job handling as
    :func:`transfer`. The meta-features' scale comes from the public site models only."""
    return submit_charged_job(
        uow,
        actor=actor,
        draft=_feature_draft(study_id, request, actor),
        runner=runner,
        idempotency_key=idempotency_key,
        context=context,
    )


def _feature_draft(
    study_id: str, request: FeatureRequest, actor: Principal
) -> Callable[[UnitOfWork], JobDraft]:
    """:func:`feature`'s job: its checked parameters and its :func:`_charged_draft`."""
    if request.meta_features not in META_FEATURE_KINDS:
        raise InvalidInputError(f"meta_features must be one of {', '.join(META_FEATURE_KINDS)}")
    if request.mechanism not in FEATURE_MECHANISMS:
        raise InvalidInputError(
            f"the meta-level mechanism must be one of {', '.join(FEATURE_MECHANISMS)}"
        )
    params = {
        "epsilon": request.epsilon,
        "delta": request.delta,
        "mechanism": request.mechanism,
        "meta_features": request.meta_features,
        "regularization": request.regularization,
        "loss": request.loss,
        "name": request.name,
    }
    return _charged_draft(
        study_id,
        _feature_spec(params),
        request.holdout_dataset_id,
        request.source_models,
        params,
        actor,
    )


@dataclass(frozen=True, slots=True)
class AggregationQuote:
    """What an aggregation would spend (a dry run): the cost charged to the coordinator's
    dataset (nothing for ``average``), the calibration and that dataset's remaining budget."""

    method: str
    dataset_id: str | None
    epsilon: float
    delta: float
    expected_noise_norm: float | None
    composition: str
    calibration: dict[str, Any]
    remaining_epsilon: float | None
    remaining_delta: float | None


def quote_aggregation(
    uow: UnitOfWork,
    *,
    study_id: str,
    request: AggregationRequest | TransferRequest | FeatureRequest,
    actor: Principal,
) -> AggregationQuote:
    """The dry run of an aggregation: every check of the real request (the same 404, 403 and
    422), the cost and the calibration, from public quantities; spends and writes nothing."""
    if isinstance(request, AggregationRequest):
        site_id = actor.require_site()
        if request.method != "average":
            raise InvalidInputError(f"unknown aggregation method {request.method!r}")
        with uow:
            study = visible_study(uow, study_id, actor)
            if study.coordinator_site_id != site_id:
                raise PermissionDeniedError("only the study's coordinator can run aggregations")
            _average(_select_inputs(uow, study, request.models), request.weights)
        return AggregationQuote(
            method="average",
            dataset_id=None,
            epsilon=0.0,
            delta=0.0,
            expected_noise_norm=None,
            composition="averaging released models is post-processing and reads no data",
            calibration={},
            remaining_epsilon=None,
            remaining_delta=None,
        )
    draft = (
        _transfer_draft(uow, study_id, request, actor)
        if isinstance(request, TransferRequest)
        else _feature_draft(study_id, request, actor)
    )
    with uow:
        drafted = draft(uow)
        pricing = drafted.price()
        assert drafted.dataset_id is not None  # a charged aggregation has its dataset
        dataset = uow.datasets.get(drafted.dataset_id)
        assert dataset is not None
        remaining_epsilon, remaining_delta = budgets.remaining(dataset)
    calibration = pricing.calibration
    assert calibration is not None
    return AggregationQuote(
        method=pricing.mechanism,
        dataset_id=drafted.dataset_id,
        epsilon=float(calibration.epsilon),
        delta=float(calibration.delta),
        expected_noise_norm=calibration.expected_noise_norm,
        composition=calibration.composition,
        calibration=json_safe(dict(calibration.details)),
        remaining_epsilon=remaining_epsilon,
        remaining_delta=remaining_delta,
    )


def _unmetered_entries(
    inputs: Sequence[Mapping[str, Any]], no_dp: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Record entries for inputs whose data PrivFit did not meter: uploaded classifiers (a
    declared claim at most) and fitted models with no DP guarantee."""
    entries: list[dict[str, Any]] = [
        {
            "id": None,
            "site_id": e["site_id"],
            "models": [e["model_id"]],
            "guarantee": e["guarantee"],
            "verified": False,
            "epsilon": None,
            "delta": None,
            "description": "the data the uploader trained on (not known to PrivFit)",
            "claim": e.get("claim"),
        }
        for e in inputs
        if e["source"] == "upload"
    ]
    entries.extend(
        {
            "id": d.get("id"),
            "site_id": e["site_id"],
            "models": [e["model_id"]],
            "guarantee": "none",
            "verified": True,
            "epsilon": None,
            "delta": None,
        }
        for e in no_dp
        if e["source"] != "upload"
        for d in e["datasets"]
    )
    return entries
