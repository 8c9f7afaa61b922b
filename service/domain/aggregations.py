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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from service.db.base import utcnow
from service.db.models import Job, Model, Study, new_id
from service.db.uow import UnitOfWork
from service.domain import audit
from service.domain.audit import AuditContext
from service.domain.errors import InvalidInputError, PermissionDeniedError
from service.domain.principal import Principal
from service.domain.privacy_record import (
    NEIGHBOURING,
    RECORD_VERSION,
    UNVERIFIED_NOTE,
    json_safe,
    software_version,
)
from service.domain.studies import visible_study
from service.dp.aggregation import average_coefficients, normalised_weights

__all__ = ["AGGREGATION_METHODS", "AggregationRequest", "aggregate", "average_privacy_record"]

AGGREGATION_METHODS = ("average",)


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
        dupes = sorted({m for m in ids if ids.count(m) > 1})
        if dupes:
            raise InvalidInputError(
                "a model is named more than once: " + ", ".join(map(repr, dupes)),
                errors=[{"loc": ["body", "models"], "msg": "duplicate model ids"}],
            )
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
    per_dataset: dict[str, dict[str, Any]] = {}
    for entry in inputs:
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
    datasets: list[dict[str, Any]] = list(per_dataset.values())
    datasets.extend(
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
    )
    datasets.extend(
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


def aggregate(
    uow: UnitOfWork,
    *,
    study_id: str,
    request: AggregationRequest,
    actor: Principal,
    context: AuditContext,
) -> Job:
    """Run an aggregation for the study's coordinator; returns its (finished) job.

    404 for a study the caller is not in, 403 for a member that is not the coordinator, 422
    for an unknown method, no or foreign models, bad weights or stacked models.
    """
    site_id = actor.require_site()
    if request.method not in AGGREGATION_METHODS:
        raise InvalidInputError(f"unknown aggregation method {request.method!r}")
    with uow:
        study = visible_study(uow, study_id, actor)
        if study.coordinator_site_id != site_id:
            raise PermissionDeniedError("only the study's coordinator can run aggregations")
        inputs = _select_inputs(uow, study, request.models)
        pi, coef = _average(inputs, request.weights)
        now = utcnow()
        job_id, model_id = new_id(), new_id()
        entries = [_input_entry(item, float(w)) for item, w in zip(inputs, pi, strict=True)]
        record = average_privacy_record(entries, job_id=job_id, study_id=study.id)
        losses = {i.model.loss for i in inputs}
        uow.jobs.add(
            Job(
                id=job_id,
                owner_site_id=site_id,
                kind="aggregate",
                dataset_id=None,
                params=json_safe(
                    {
                        "method": request.method,
                        "study_id": study.id,
                        "models": [i.model.id for i in inputs],
                        "weights": [float(w) for w in pi],
                    }
                ),
                status="succeeded",
                progress=1.0,
                attempt=1,
                model_id=model_id,
                created_at=now,
                started_at=now,
                finished_at=now,
            )
        )
        uow.models.add(
            Model(
                id=model_id,
                owner_site_id=site_id,
                name=request.name,
                source="aggregate",
                mechanism=request.method,
                loss=losses.pop() if len(losses) == 1 else "other",
                feature_names=list(study.feature_names),
                preprocessing=dict(study.preprocessing),
                body={"kind": "linear", "coef": [float(v) for v in coef]},
                label=dict(study.spec.get("label") or {}),
                privacy=record,
                dataset_id=None,
                job_id=job_id,
                study_id=study.id,
            )
        )
        uow.studies.mark_used([i.contribution_id for i in inputs], at=now)
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
        job = uow.jobs.get(job_id)
        assert job is not None
        return job
