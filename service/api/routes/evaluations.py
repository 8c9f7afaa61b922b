"""Private evaluations: ``POST /v1/models/{id}/evaluations`` queues one (or quotes it with
``dry_run``); ``GET`` reads them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status
from fastapi.responses import JSONResponse

from service.api.charged_calls import ChargedJobCallDep, charged_job_responses
from service.api.deps import (
    Expensive,
    PrincipalDep,
    UowDep,
    access,
)
from service.api.errors import problem_responses
from service.api.json_body import JsonRoute
from service.api.routes import API_V1
from service.api.schemas.base import page_read
from service.api.schemas.evaluations import (
    EvaluationCreate,
    EvaluationList,
    EvaluationQuoteRead,
    EvaluationRead,
)
from service.api.schemas.jobs import JobRead
from service.domain.models import evaluations

router = APIRouter(prefix=f"{API_V1}", tags=["evaluations"], route_class=JsonRoute)

Limit = Annotated[int, Query(ge=1, le=200, description="Page size.")]
Offset = Annotated[int, Query(ge=0, le=1_000_000_000, description="Items to skip.")]


@router.post(
    "/models/{model_id}/evaluations",
    dependencies=[Expensive],
    status_code=status.HTTP_202_ACCEPTED,
    summary="Evaluate a model privately on a dataset",
    description=(
        "Evaluates a model the caller may read on a dataset the caller owns with the same spec "
        "(422 otherwise, nothing spent), charging ε (δ = 0) to that dataset's budget (409 when "
        "it cannot cover it) and queueing a job: 202 with the job and its `Location`. The "
        "succeeded job's result is at `GET /v1/evaluations/{job id}`: the confusion matrix "
        "with discrete Laplace noise (ε/2, L1 sensitivity 2), accuracy, precision, recall and "
        "F1 with intervals that include the noise, and a ROC curve/AUC from noisy per-class "
        "score histograms (ε/2). The record warns when the dataset is the model's training "
        "set. `Prefer: wait=N`, `Idempotency-Key` and `?dry_run=true` work as for fits. "
        "For the admin key the model does not exist (404, as for an unknown id)."
    ),
    response_model=JobRead,
    responses=charged_job_responses(EvaluationQuoteRead),
    openapi_extra=access("owner"),
)
async def create_evaluation(
    model_id: str, body: EvaluationCreate, call: ChargedJobCallDep
) -> JobRead | JSONResponse:
    return await call.run(
        evaluations.quote_evaluation,
        EvaluationQuoteRead.from_quote,
        evaluations.submit_evaluation,
        model_id=model_id,
        dataset_id=body.dataset_id,
        epsilon=body.epsilon,
    )


@router.get(
    "/models/{model_id}/evaluations",
    summary="List a model's private evaluations",
    description=(
        "The evaluations of the model that the calling site ran, newest first. For other "
        "sites that do not read the model and for the admin key the model does not exist "
        "(404, as for an unknown id)."
    ),
    response_model=EvaluationList,
    responses=problem_responses(401, 404, 422),
    openapi_extra=access("owner"),
)
def list_evaluations(
    model_id: str, uow: UowDep, principal: PrincipalDep, limit: Limit = 50, offset: Offset = 0
) -> EvaluationList:
    page = evaluations.list_evaluations(
        uow, model_id=model_id, actor=principal, limit=limit, offset=offset
    )
    return page_read(EvaluationList, page, EvaluationRead.from_row, limit=limit, offset=offset)


@router.get(
    "/evaluations/{evaluation_id}",
    summary="Read a private evaluation",
    description=(
        "A released evaluation (its id is the id of the job that computed it). Only the site "
        "that ran it reads it; for other sites and the admin key it does not exist (404, as for "
        "an unknown id)."
    ),
    response_model=EvaluationRead,
    responses=problem_responses(401, 404, 422),
    openapi_extra=access("owner"),
)
def get_evaluation(evaluation_id: str, uow: UowDep, principal: PrincipalDep) -> EvaluationRead:
    return EvaluationRead.from_row(
        evaluations.get_evaluation(uow, evaluation_id=evaluation_id, actor=principal)
    )
