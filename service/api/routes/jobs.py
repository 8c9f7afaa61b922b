"""Jobs: poll a fit's progress and outcome, or cancel it."""

from __future__ import annotations

import asyncio
from typing import Annotated, Final

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from service.api.deps import PrincipalDep, UowDep, access
from service.api.errors import problem_responses
from service.api.routes import API_V1
from service.api.schemas.jobs import JobList, JobRead
from service.domain import jobs
from service.domain.jobs import JobOutcome, JobView

router = APIRouter(prefix=f"{API_V1}/jobs", tags=["jobs"])

Limit = Annotated[int, Query(ge=1, le=200, description="Page size.")]
Offset = Annotated[int, Query(ge=0, le=1_000_000_000, description="Items to skip.")]
Wait = Annotated[
    float,
    Query(
        ge=0,
        le=30,
        allow_inf_nan=False,
        description="Long poll: wait up to this many seconds for a queued or running job to "
        "end before answering (0, the default: answer at once).",
    ),
]

MAX_WAIT_SECONDS: Final[float] = 30.0
#: How often a long poll re-reads a job this process's runner is not executing.
FALLBACK_POLL_SECONDS: Final[float] = 0.025
_UNFINISHED: Final[frozenset[str]] = frozenset({"queued", "running"})


async def _until_done(request: Request, job_id: str, timeout: float) -> JobView | None:
    """Return once the runner reports the job's execution ended, or after ``timeout`` (or
    after a short interval when the runner does not run the job here). When the run
    succeeded, returns the job as the worker committed it (terminal: it cannot change any
    more), so the answer needs no second read; otherwise None, and the caller reads it."""
    runner = request.app.state.job_runner
    notify = getattr(runner, "notify_when_done", None)
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[object] = loop.create_future()

    def settle(returned: object) -> None:
        if not ended.done():
            ended.set_result(returned)

    if notify is None or not notify(
        job_id, lambda returned: loop.call_soon_threadsafe(settle, returned)
    ):
        await asyncio.sleep(min(timeout, FALLBACK_POLL_SECONDS))
        return None
    try:
        returned = await asyncio.wait_for(ended, timeout)
    except TimeoutError:
        return None
    if (
        isinstance(returned, JobOutcome)
        and returned.view is not None
        and returned.view.job.id == job_id
        and returned.view.job.status == "succeeded"
    ):
        return returned.view
    return None


@router.get(
    "",
    summary="List jobs",
    description="The calling site's jobs, newest first (the admin sees every site's).",
    response_model=JobList,
    responses=problem_responses(401, 422),
    openapi_extra=access("any"),
)
def list_jobs(
    uow: UowDep, principal: PrincipalDep, limit: Limit = 50, offset: Offset = 0
) -> JobList:
    page = jobs.list_jobs(uow, actor=principal, limit=limit, offset=offset)
    return JobList(
        items=[JobRead.from_view(v) for v in page.items],
        total=page.total,
        limit=limit,
        offset=offset,
    )


@router.get(
    "/{job_id}",
    summary="Get a job",
    description=(
        "`status`: queued, running, succeeded (see `model_id`), failed (see `error`, a problem "
        "object without data or internals) or cancelled; `progress` from 0 to 1. Another "
        "site's job is 404.\n\n"
        "`?wait=s` makes it a long poll: a job still queued or running is answered when it "
        "ends, or after `s` seconds (at most 30) with its status then, so a client can wait "
        "for a fit without polling in a loop."
    ),
    response_model=JobRead,
    responses=problem_responses(401, 404, 422),
    openapi_extra=access("any"),
)
async def get_job(
    job_id: str, request: Request, uow: UowDep, principal: PrincipalDep, wait: Wait = 0.0
) -> JobRead:
    view = await run_in_threadpool(jobs.get_job, uow, job_id=job_id, actor=principal)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(wait, MAX_WAIT_SECONDS)
    while view.job.status in _UNFINISHED and (remaining := deadline - loop.time()) > 0:
        # The job was found visible to the caller above; its final state may come with the
        # runner's notice.
        finished = await _until_done(request, job_id, remaining)
        if finished is not None:
            view = finished
        else:
            view = await run_in_threadpool(jobs.get_job, uow, job_id=job_id, actor=principal)
    return JobRead.from_view(view)


@router.post(
    "/{job_id}/cancel",
    summary="Cancel a job",
    description=(
        "A queued job is cancelled at once and its budget charge refunded. A running job is "
        "asked to stop: it ends `cancelled` at its next progress report, and its budget stays "
        "spent (DESIGN §2: a started job is never refunded, since its outcome could reveal "
        "something). A finished job is a 409."
    ),
    response_model=JobRead,
    responses=problem_responses(401, 404, 409, 422),
    openapi_extra=access("any"),
)
def cancel_job(job_id: str, uow: UowDep, principal: PrincipalDep) -> JobRead:
    return JobRead.from_view(jobs.cancel_job(uow, job_id=job_id, actor=principal))
