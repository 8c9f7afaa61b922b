"""Fits: ``POST /v1/datasets/{id}/fits`` queues a fit job (or quotes it with ``dry_run``)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from service.api.deps import (
    AuditContextDep,
    DryRun,
    Expensive,
    IdempotencyKey,
    PreferWait,
    PrincipalDep,
    RunnerDep,
    UowDep,
    access,
)
from service.api.errors import problem_responses
from service.api.job_waiting import FINISHED_RESPONSE, honour_prefer_wait
from service.api.routes import API_V1
from service.api.schemas.fits import FitCreate, FitQuoteRead
from service.api.schemas.jobs import JobRead
from service.domain.fits import submit as fits
from service.domain.fits import tuning
from service.domain.fits.tuning import TunedFitRequest
from service.jobs.runner import JobRunner

router = APIRouter(prefix=f"{API_V1}/datasets", tags=["fits"])


@router.post(
    "/{dataset_id}/fits",
    dependencies=[Expensive],
    status_code=status.HTTP_202_ACCEPTED,
    summary="Fit a model on a dataset",
    description=(
        "Validates the request (422 for an unknown mechanism or bad parameters, before "
        "anything is spent), charges the dataset's budget with the fit's (ε, δ) (409 with the "
        "remaining budget when it cannot cover it) and queues a job: 202 with the job and its "
        "`Location`. Poll `GET /v1/jobs/{id}` until it ends (`?wait=s` for a long poll); a "
        "succeeded job names its model. With `Prefer: wait=N` the answer comes when the job "
        "has ended (201 with the finished job) or after N seconds (202). The charge is "
        "committed before any noise is drawn and is refunded only if the job is cancelled "
        "while still queued.\n\n"
        "`?dry_run=true` answers 200 with the exact cost, the calibration (expected noise "
        "norm) and the remaining budget, spending nothing. `non_private` is accepted only on "
        "datasets uploaded with `allow_non_private`. Requires the owning site's key."
    ),
    response_model=JobRead,
    responses={
        200: {"model": FitQuoteRead, "description": "Dry run: the quote; nothing spent."},
        **FINISHED_RESPONSE,
        **problem_responses(401, 403, 404, 409, 413, 422),
    },
    openapi_extra=access("site"),
)
async def create_fit(
    dataset_id: str,
    body: FitCreate,
    request: Request,
    response: Response,
    uow: UowDep,
    principal: PrincipalDep,
    audit_context: AuditContextDep,
    runner: RunnerDep,
    idempotency_key: IdempotencyKey = None,
    dry_run: DryRun = False,
    prefer: PreferWait = None,
) -> JobRead | JSONResponse:
    principal.require_site()
    tuned = body.to_tuned()
    if tuned is not None:
        return await _create_tuned_fit(
            dataset_id,
            tuned,
            request,
            response,
            uow,
            principal,
            audit_context,
            idempotency_key,
            dry_run=dry_run,
            prefer=prefer,
        )
    fit_request = body.to_domain()
    if dry_run:
        quote = await run_in_threadpool(
            fits.quote_fit, uow, dataset_id=dataset_id, request=fit_request, actor=principal
        )
        return JSONResponse(FitQuoteRead.from_quote(quote).model_dump(mode="json"))
    submitted = await run_in_threadpool(
        fits.submit_fit,
        uow,
        dataset_id=dataset_id,
        request=fit_request,
        actor=principal,
        runner=runner,
        idempotency_key=idempotency_key,
        context=audit_context,
    )
    view = submitted.view
    response.headers["Location"] = f"{API_V1}/jobs/{view.job.id}"
    if not submitted.created:
        response.headers["Idempotent-Replayed"] = "true"
    view = await honour_prefer_wait(request, response, uow, principal, view, prefer)
    return JobRead.from_view(view)


async def _create_tuned_fit(
    dataset_id: str,
    tuned: TunedFitRequest,
    request: Request,
    response: Response,
    uow: UowDep,
    principal: PrincipalDep,
    audit_context: AuditContextDep,
    idempotency_key: str | None,
    *,
    dry_run: bool,
    prefer: str | None,
) -> JobRead | JSONResponse:
    """A fit with candidate λs: the private tuning of :mod:`service.domain.fits.tuning`."""
    if dry_run:
        quote = await run_in_threadpool(
            tuning.quote_tuned_fit, uow, dataset_id=dataset_id, request=tuned, actor=principal
        )
        return JSONResponse(FitQuoteRead.from_quote(quote).model_dump(mode="json"))
    runner: JobRunner = request.app.state.job_runner
    submitted = await run_in_threadpool(
        tuning.submit_tuned_fit,
        uow,
        dataset_id=dataset_id,
        request=tuned,
        actor=principal,
        runner=runner,
        idempotency_key=idempotency_key,
        context=audit_context,
    )
    view = submitted.view
    response.headers["Location"] = f"{API_V1}/jobs/{view.job.id}"
    if not submitted.created:
        response.headers["Idempotent-Replayed"] = "true"
    view = await honour_prefer_wait(request, response, uow, principal, view, prefer)
    return JobRead.from_view(view)
