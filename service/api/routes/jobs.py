"""Jobs: poll a fit's progress and outcome, or cancel it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from service.api.deps import PrincipalDep, UowDep, access
from service.api.errors import problem_responses
from service.api.job_waiting import MAX_WAIT_SECONDS, wait_for_job
from service.api.json_body import JsonRoute
from service.api.routes import API_V1
from service.api.schemas.base import page_read
from service.api.schemas.jobs import JobList, JobRead
from service.domain.jobs import lifecycle as jobs

router = APIRouter(prefix=f"{API_V1}/jobs", tags=["jobs"], route_class=JsonRoute)

Limit = Annotated[int, Query(ge=1, le=200, description="Page size.")]
Offset = Annotated[int, Query(ge=0, le=1_000_000_000, description="Items to skip.")]
Wait = Annotated[
    float,
    Query(
        ge=0,
        le=MAX_WAIT_SECONDS,
        allow_inf_nan=False,
        description="Long poll: wait up to this many seconds for a queued or running job to "
        "end before answering (0, the default: answer at once).",
    ),
]


@router.get(
    "",
    summary="List jobs",
    description=(
        "The calling site's jobs, newest first. Requires a site key (the admin key, which owns no "
        "site data, gets 403)."
    ),
    response_model=JobList,
    responses=problem_responses(401, 403, 422),
    openapi_extra=access("site"),
)
def list_jobs(
    uow: UowDep, principal: PrincipalDep, limit: Limit = 50, offset: Offset = 0
) -> JobList:
    page = jobs.list_jobs(uow, actor=principal, limit=limit, offset=offset)
    return page_read(JobList, page, JobRead.from_view, limit=limit, offset=offset)


@router.get(
    "/{job_id}",
    summary="Get a job",
    description=(
        "`status`: queued, running, succeeded (see `model_id`), failed (see `error`, a problem "
        "object without data or internals) or cancelled; `progress` from 0 to 1. Owner only: "
        "for other sites and the admin key it does not exist (404, as for an unknown id).\n\n"
        "`?wait=s` makes it a long poll: a job still queued or running is answered when it "
        "ends, or after `s` seconds (at most 30) with its status then, so a client can wait "
        "for a fit without polling in a loop."
    ),
    response_model=JobRead,
    responses=problem_responses(401, 404, 422),
    openapi_extra=access("owner"),
)
async def get_job(
    job_id: str, request: Request, uow: UowDep, principal: PrincipalDep, wait: Wait = 0.0
) -> JobRead:
    view = await run_in_threadpool(jobs.get_job, uow, job_id=job_id, actor=principal)
    if wait > 0:
        view = await wait_for_job(request, uow, principal, view, wait)
    return JobRead.from_view(view)


@router.post(
    "/{job_id}/cancel",
    summary="Cancel a job",
    description=(
        "A queued job is cancelled at once and its budget charge refunded. A running job is "
        "asked to stop: it ends `cancelled` at its next progress report, and its budget stays "
        "spent (docs/design.md §2: a started job is never refunded, since its outcome could "
        "reveal something). A finished job is a 409. Owner only: for other sites and the admin "
        "key it does not exist (404, as for an unknown id), and nothing is cancelled."
    ),
    response_model=JobRead,
    responses=problem_responses(401, 404, 409, 422),
    openapi_extra=access("owner"),
)
def cancel_job(job_id: str, uow: UowDep, principal: PrincipalDep) -> JobRead:
    return JobRead.from_view(jobs.cancel_job(uow, job_id=job_id, actor=principal))
