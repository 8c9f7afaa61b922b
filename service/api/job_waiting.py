"""Waiting for a job to end inside a request: the long poll of ``GET /v1/jobs/{id}?wait=s``
and ``Prefer: wait=s`` on the requests that queue a job (RFC 7240).

The wait costs no database reads while the job runs here: the runner tells the waiting request
when its execution ended (``notify_when_done``) and hands over the job as the worker committed
it. With the distributed queue (``subscribe_finished``) the job runs in another process: the
request subscribes to the job's final-state notification (PostgreSQL LISTEN/NOTIFY, from any
process), reads the job once more (it may have ended just before), then sleeps until notified.
Otherwise a job this process does not run (a restart) is re-read every
:data:`FALLBACK_POLL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from functools import partial
from typing import Any, Final

from fastapi import Request, Response, status
from starlette.concurrency import run_in_threadpool

from service.api.routes import API_V1
from service.api.schemas.jobs import JobRead
from service.db.models import Job
from service.db.uow import UnitOfWork
from service.domain.access.principal import Principal
from service.domain.jobs import lifecycle as jobs
from service.domain.jobs.charged import SubmittedJob
from service.domain.jobs.lifecycle import JobOutcome, JobView

__all__ = [
    "FALLBACK_POLL_SECONDS",
    "FINISHED_RESPONSE",
    "MAX_WAIT_SECONDS",
    "honour_prefer_wait",
    "preferred_wait",
    "submitted_job_answer",
    "wait_for_job",
]

MAX_WAIT_SECONDS: Final[float] = 30.0
#: How often a wait re-reads a job this process's runner is not executing.
FALLBACK_POLL_SECONDS: Final[float] = 0.025
_UNFINISHED: Final[frozenset[str]] = frozenset({"queued", "running"})

#: ``wait=<delta-seconds>`` in a ``Prefer`` header (RFC 7240 §4.3); name case-insensitive,
#: the value optionally quoted.
_WAIT = re.compile(r'^\s*wait\s*=\s*"?(\d{1,9})"?\s*$', re.IGNORECASE)


#: The OpenAPI entry of the 201 a job-queuing request answers under ``Prefer: wait``.
FINISHED_RESPONSE: Final[dict[int | str, dict[str, Any]]] = {
    201: {
        "model": JobRead,
        "description": "With `Prefer: wait=N`: the job ended within the wait (succeeded, "
        "failed or cancelled).",
    }
}


def preferred_wait(prefer: str | None) -> int | None:
    """The seconds of a ``Prefer: wait=N`` header, capped at :data:`MAX_WAIT_SECONDS`; None
    when the header asks for no wait. Other preferences and malformed ones are ignored, as
    RFC 7240 asks of a server that does not understand them."""
    if not prefer:
        return None
    for preference in prefer.split(","):
        matched = _WAIT.match(preference.split(";", 1)[0])
        if matched is not None:
            return min(int(matched.group(1)), int(MAX_WAIT_SECONDS))
    return None


async def honour_prefer_wait(
    request: Request,
    response: Response,
    uow: UnitOfWork,
    actor: Principal,
    view: JobView,
    prefer: str | None,
) -> JobView:
    """The answer of a request that has just queued the job of ``view``: under
    ``Prefer: wait=N``, the job once it has ended (and status 201) or as it stands after N
    seconds, with ``Preference-Applied``; else ``view`` itself."""
    wait = preferred_wait(prefer)
    if wait is None:
        return view
    response.headers["Preference-Applied"] = f"wait={wait}"
    view = await wait_for_job(request, uow, actor, view, wait)
    if view.job.status not in _UNFINISHED:
        response.status_code = status.HTTP_201_CREATED
    return view


async def submitted_job_answer(
    request: Request,
    response: Response,
    uow: UnitOfWork,
    actor: Principal,
    submitted: SubmittedJob,
    prefer: str | None,
) -> JobRead:
    """The answer of every request that queues a charged job: its ``Location``,
    ``Idempotent-Replayed: true`` for a retry that found the first request's job, and the job
    as :func:`honour_prefer_wait` leaves it."""
    response.headers["Location"] = f"{API_V1}/jobs/{submitted.job.id}"
    if not submitted.created:
        response.headers["Idempotent-Replayed"] = "true"
    view = await honour_prefer_wait(request, response, uow, actor, submitted.view, prefer)
    return JobRead.from_view(view)


async def wait_for_job(
    request: Request, uow: UnitOfWork, actor: Principal, view: JobView, seconds: float
) -> JobView:
    """``view`` (a job already found visible to ``actor``) once the job has ended, or as it
    stands after ``seconds`` (at most :data:`MAX_WAIT_SECONDS`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(seconds, MAX_WAIT_SECONDS)
    job_id = view.job.id
    if getattr(request.app.state.job_runner, "subscribe_finished", None) is not None:
        return await _wait_for_notification(request, uow, actor, view, deadline)
    while view.job.status in _UNFINISHED and (remaining := deadline - loop.time()) > 0:
        finished = await _until_done(request, job_id, remaining)
        if finished is not None:
            # A job that ran keeps the charges it was created with (only a queued job is
            # ever refunded): the ones read above.
            view = JobView(finished, view.charges)
        else:
            view = await run_in_threadpool(jobs.get_job, uow, job_id=job_id, actor=actor)
    return view


async def _wait_for_notification(
    request: Request, uow: UnitOfWork, actor: Principal, view: JobView, deadline: float
) -> JobView:
    """The wait of :func:`wait_for_job` on a runner that notifies a job's end from any process:
    subscribe, re-read (the job may have ended before the subscription), sleep until the
    notification or the deadline, read the final state."""
    loop = asyncio.get_running_loop()
    job_id = view.job.id
    while view.job.status in _UNFINISHED and (remaining := deadline - loop.time()) > 0:
        ended = asyncio.Event()
        unsubscribe = request.app.state.job_runner.subscribe_finished(
            job_id, partial(loop.call_soon_threadsafe, ended.set)
        )
        if unsubscribe is None:  # not listening (reconnecting): fall back to a short sleep
            await asyncio.sleep(min(remaining, FALLBACK_POLL_SECONDS))
            view = await run_in_threadpool(jobs.get_job, uow, job_id=job_id, actor=actor)
            continue
        try:
            view = await run_in_threadpool(jobs.get_job, uow, job_id=job_id, actor=actor)
            if view.job.status not in _UNFINISHED:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended.wait(), remaining)
            view = await run_in_threadpool(jobs.get_job, uow, job_id=job_id, actor=actor)
        finally:
            unsubscribe()
    return view


async def _until_done(request: Request, job_id: str, timeout: float) -> Job | None:
    """Return once the runner reports the job's execution ended, or after ``timeout`` (or
    after a short interval when the runner does not run the job here). When the run
    succeeded, returns the job row as the worker committed it (terminal: it cannot change
    any more), so the answer needs no second read; otherwise None, and the caller reads it."""
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
        and returned.job is not None
        and returned.job.id == job_id
        and returned.job.status == "succeeded"
    ):
        return returned.job
    return None
