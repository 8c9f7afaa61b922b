"""``average``: the study's contributed models averaged (seed 000, Alg. 4).

The (optionally weighted) average of the contributed coefficient vectors
(:func:`service.dp.multisite.aggregation.average_coefficients`). It reads no data, so it runs inside
the request and its job is stored already ``succeeded`` (kind ``aggregate``), naming a model
(``source = 'aggregate'``) that every member of the study reads. Averaging released models is
post-processing: nothing new is charged, and the record (:mod:`service.domain.records.aggregations`)
composes the inputs' own guarantees. Stacked models are not one weight vector: averaging them
is a 422. Multi-class models average their (K, d) matrices entry by entry (the study's spec
fixes the classes and their order, so row k is class k in every input); regression models
average their weight vectors (the study's spec fixes the bounds, so every score is in the
same [−1, 1] units). Both are post-processing like the binary average.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.db.base import utcnow
from service.db.errors import IntegrityConflictError
from service.db.models import Job, new_id
from service.db.uow import UnitOfWork
from service.domain import audit
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.errors import (
    ConflictError,
    InvalidInputError,
    PermissionDeniedError,
)
from service.domain.ids import check_idempotency_key
from service.domain.jobs.charged import (
    SubmittedJob,
    replayed_job,
)
from service.domain.jobs.lifecycle import (
    JobView,
)
from service.domain.records.aggregations import average_privacy_record, input_entry
from service.domain.records.base import (
    json_safe,
)
from service.domain.studies.aggregation_inputs import average_inputs, mark_used, select_inputs
from service.domain.studies.membership import StudyFacts, visible_study
from service.dp.core.released import MulticlassModel

AGGREGATION_METHODS = ("average", "feature", "transfer")


@dataclass(frozen=True, slots=True)
class AggregationRequest:
    """What the coordinator asked for."""

    method: str
    models: Sequence[str] | None = None
    weights: Sequence[float] | None = None
    name: str | None = None


def averaged_body(coef: Any) -> dict[str, Any]:
    """The stored body of an averaged model: a linear model (a vector: binary, regression) or
    a multi-class one (a (K, d) matrix)."""
    if getattr(coef, "ndim", 1) == 2:
        return MulticlassModel(coef=coef).to_dict()
    return {"kind": "linear", "coef": [float(v) for v in coef]}


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
    site_id = actor.site_or_not_found("study")
    check_idempotency_key(idempotency_key)
    if request.method != "average":
        raise InvalidInputError(f"unknown aggregation method {request.method!r}")
    try:
        with uow:
            study = visible_study(uow, study_id, actor)
            if study.coordinator_site_id != site_id:
                raise PermissionDeniedError("only the study's coordinator can run aggregations")
            inputs = select_inputs(uow, study, request.models)
            pi, coef = average_inputs(inputs, request.weights)
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
            entries = [
                input_entry(item.model, item.site_id, float(w))
                for item, w in zip(inputs, pi, strict=True)
            ]
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
                    body=averaged_body(coef),
                    privacy=record,
                )
            )
            mark_used(uow, inputs, now)
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
