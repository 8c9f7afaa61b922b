"""Fits: ``POST /v1/datasets/{id}/fits`` queues a fit job (or quotes it with ``dry_run``)."""

from __future__ import annotations

from fastapi import APIRouter, status
from fastapi.responses import JSONResponse

from service.api.charged_calls import ChargedJobCallDep, charged_job_responses
from service.api.deps import (
    Expensive,
    UowFactoryDep,
    access,
)
from service.api.json_body import JsonRoute
from service.api.routes import API_V1
from service.api.schemas.fits import FitCreate, FitQuoteRead
from service.api.schemas.jobs import JobRead
from service.domain.fits import submit as fits
from service.domain.fits.tuning import submit as tuning

router = APIRouter(prefix=f"{API_V1}/datasets", tags=["fits"], route_class=JsonRoute)


@router.post(
    "/{dataset_id}/fits",
    dependencies=[Expensive],
    status_code=status.HTTP_202_ACCEPTED,
    summary="Fit a model on a dataset",
    description=(
        "Validates the request (422 for an unknown mechanism or bad parameters, and 422 "
        "`job-too-large` for a job whose estimated work exceeds the service's limit, before "
        "anything is spent), charges the dataset's budget with the fit's (ε, δ) (409 with the "
        "remaining budget when it cannot cover it) and queues a job: 202 with the job and its "
        "`Location`. Poll `GET /v1/jobs/{id}` until it ends (`?wait=s` for a long poll); a "
        "succeeded job names its model. With `Prefer: wait=N` the answer comes when the job "
        "has ended (201 with the finished job) or after N seconds (202). The charge is "
        "committed before any noise is drawn and is refunded only if the job is cancelled "
        "while still queued.\n\n"
        "`?dry_run=true` answers 200 with the exact cost, the calibration (expected noise "
        "norm), the expected accuracy band next to the majority-class baseline (and a "
        "`below_majority_baseline` warning when it is below; on a numeric label the RMSE band "
        "next to the public reference mean's RMSE and a `worse_than_mean_baseline` warning "
        "when it is above) and the remaining budget, "
        "spending nothing. `mechanism: auto` chooses the mechanism (and λ when omitted) from "
        "public quantities, at no cost; the quote and the job say what and why. "
        "`non_private` is accepted only on datasets uploaded with `allow_non_private`. "
        "Requires the owning site's key: for other sites and the admin key it does not "
        "exist (404, as for an unknown id), and nothing is charged."
    ),
    response_model=JobRead,
    responses=charged_job_responses(FitQuoteRead),
    openapi_extra=access("owner"),
)
async def create_fit(
    dataset_id: str, body: FitCreate, call: ChargedJobCallDep, uow_factory: UowFactoryDep
) -> JobRead | JSONResponse:
    body.check_auto()
    tuned = body.to_tuned()
    if tuned is not None:  # candidate λs (or step sizes): the private tuning
        return await call.run(
            tuning.quote_tuned_fit,
            FitQuoteRead.from_quote,
            tuning.submit_tuned_fit,
            dataset_id=dataset_id,
            request=tuned,
        )
    return await call.run(
        fits.quote_fit,
        FitQuoteRead.from_quote,
        fits.submit_fit,
        dataset_id=dataset_id,
        request=body.to_domain(),
        uow_factory=uow_factory,
    )
