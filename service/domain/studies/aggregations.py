"""Aggregations: the coordinator combines a study's contributed models (issue 5 item 3).

``average`` (seed 000, Alg. 4) is the (optionally weighted) average of the contributed
coefficient vectors, :func:`service.dp.multisite.aggregation.average_coefficients`. It reads no
data, so
it is cheap: it runs inside the request and its job is stored already ``succeeded`` (kind
``aggregate``), naming a model (``source = 'aggregate'``) that every member of the study reads.

Privacy (docs/design.md §2, §3): averaging released models is post-processing, so nothing new is
charged. The result's record lists every input model with the guarantee it carried, composes
the verified guarantees per dataset (parallel across datasets, sequential — ε and δ add — when
two inputs were fitted on the same dataset), labels an uploaded classifier's guarantee as the
uploader's declared claim, and, when any input has no DP guarantee, says plainly that the
average has none. Stacked models are not one weight vector: averaging them is a 422.

``feature`` and ``transfer`` fit a DP model on one of the coordinator's own datasets: they are
charged jobs (:func:`service.domain.jobs.charged.submit_charged_job`: the request is checked,
the dataset charged and the job queued in one transaction, ``Idempotency-Key`` honoured), and
the job runs on the job runner like a single-dataset fit
(:func:`.charged_aggregations.run_aggregation_job`, registered in :mod:`service.runtime.worker`):
progress, cancellation, recovery, the release guard and the ledger rules are the same.
:func:`submit_aggregation` takes any of the three requests; :func:`quote_aggregation` is the
dry run of all three. The charged methods are registered in :mod:`service.dp.multisite.methods`;
their jobs are built in :mod:`.charged_aggregations`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.db.uow import UnitOfWork
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.errors import InvalidInputError, PermissionDeniedError
from service.domain.jobs.charged import SubmittedJob, submit_charged_job
from service.domain.jobs.lifecycle import JobScheduler
from service.domain.ledger import budgets
from service.domain.records.base import json_safe
from service.domain.studies.aggregation_inputs import average_inputs, select_inputs
from service.domain.studies.averaging import AggregationRequest, average
from service.domain.studies.charged_aggregations import (
    FeatureRequest,
    TransferRequest,
    charged_draft,
)
from service.domain.studies.membership import visible_study

__all__ = [
    "AggregationQuote",
    "AggregationRequest",
    "AnyAggregationRequest",
    "FeatureRequest",
    "TransferRequest",
    "quote_aggregation",
    "submit_aggregation",
]

#: What a coordinator may ask for: ``average`` (uncharged) or a charged method.
AnyAggregationRequest = AggregationRequest | TransferRequest | FeatureRequest


def submit_aggregation(
    uow: UnitOfWork,
    *,
    study_id: str,
    request: AnyAggregationRequest,
    actor: Principal,
    context: AuditContext,
    runner: JobScheduler,
    idempotency_key: str | None = None,
) -> SubmittedJob:
    """Run an aggregation for the study's coordinator; returns its job.

    ``average`` reads no data and finishes in the request (:func:`.averaging.average`). A
    charged method (``transfer``, with feature groups PST-H, or ``feature``) goes through the
    one charged-job contract (:func:`service.domain.jobs.charged.submit_charged_job`): every
    check that needs no data first (404 for a study the caller is not in or a dataset it does
    not own, 403 for a member that is not the coordinator, 422 for foreign or stacked source
    models, a dataset whose spec differs from the study's, or bad parameters), then the
    charge and the queued job in one transaction (409 when the budget cannot cover it),
    before any noise is drawn; ``Idempotency-Key`` honoured. A failure after the charge
    leaves the budget spent (docs/design.md §2); a cancel while queued refunds it.
    """
    if isinstance(request, AggregationRequest):
        return average(
            uow,
            study_id=study_id,
            request=request,
            actor=actor,
            context=context,
            idempotency_key=idempotency_key,
        )
    return submit_charged_job(
        uow,
        actor=actor,
        draft=charged_draft(uow, study_id, request, actor),
        runner=runner,
        idempotency_key=idempotency_key,
        context=context,
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
    request: AnyAggregationRequest,
    actor: Principal,
) -> AggregationQuote:
    """The dry run of an aggregation: every check of the real request (the same 404, 403 and
    422), the cost and the calibration, from public quantities; spends and writes nothing."""
    if isinstance(request, AggregationRequest):
        site_id = actor.site_or_not_found("study")
        if request.method != "average":
            raise InvalidInputError(f"unknown aggregation method {request.method!r}")
        with uow:
            study = visible_study(uow, study_id, actor)
            if study.coordinator_site_id != site_id:
                raise PermissionDeniedError("only the study's coordinator can run aggregations")
            average_inputs(select_inputs(uow, study, request.models), request.weights)
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
    draft = charged_draft(uow, study_id, request, actor)
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
