"""The request that queues a charged job (a fit, a tuned fit, an evaluation, an aggregation, a
federated fit), as one FastAPI dependency.

Every such operation takes the same things besides its path and body — the caller (a site;
the admin, which owns no dataset, model or study, gets from the domain the 404 of an unknown
id), a unit of work, the job runner, the audit context, an ``Idempotency-Key``,
``?dry_run=true`` and ``Prefer: wait=N`` — and answers the same way: the
quote with 200 on a dry run, else the job with 202 (201 once finished under ``Prefer``),
``Location`` and ``Idempotent-Replayed``. :class:`ChargedJobCall` holds those parts so each
route is its path, its body and one domain call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, Final, TypeVar

from fastapi import Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from service.api.deps import (
    AuditContextDep,
    DryRun,
    IdempotencyKey,
    PreferWait,
    PrincipalDep,
    RunnerDep,
    UowDep,
)
from service.api.errors import problem_responses
from service.api.job_waiting import FINISHED_RESPONSE, submitted_job_answer
from service.api.schemas.jobs import JobRead
from service.domain.jobs.charged import SubmittedJob

__all__ = ["ChargedJobCall", "ChargedJobCallDep", "charged_job_responses"]

Quote = TypeVar("Quote")

#: The problems every charged-job operation may answer with.
_PROBLEMS: Final = (401, 404, 409, 413, 422)


def charged_job_responses(
    quote_model: type[BaseModel], *, coordinator_only: bool = False
) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI responses of a charged-job operation besides its 202: the dry run's quote,
    the finished job under ``Prefer: wait`` and the problems (403 only where a member that is
    not the study's coordinator is refused)."""
    problems = sorted((*_PROBLEMS, 403)) if coordinator_only else _PROBLEMS
    return {
        200: {"model": quote_model, "description": "Dry run: the quote; nothing spent."},
        **FINISHED_RESPONSE,
        **problem_responses(*problems),
    }


class ChargedJobCall:
    """The parts of a request that queues a charged job (module docstring)."""

    def __init__(
        self,
        request: Request,
        response: Response,
        uow: UowDep,
        actor: PrincipalDep,
        audit_context: AuditContextDep,
        runner: RunnerDep,
        idempotency_key: IdempotencyKey = None,
        dry_run: DryRun = False,
        prefer: PreferWait = None,
    ) -> None:
        self.request = request
        self.response = response
        self.uow = uow
        self.actor = actor
        self.audit_context = audit_context
        self.runner = runner
        self.idempotency_key = idempotency_key
        self.dry_run = dry_run
        self.prefer = prefer

    async def quote(
        self,
        quote: Callable[..., Quote],
        read: Callable[[Quote], BaseModel],
        **arguments: Any,
    ) -> JSONResponse:
        """The dry run: ``quote(uow, actor=actor, **arguments)`` mapped by ``read``, as 200."""
        quoted = await run_in_threadpool(
            functools.partial(quote, self.uow, actor=self.actor, **arguments)
        )
        return JSONResponse(read(quoted).model_dump(mode="json"))

    async def submit(self, submit: Callable[..., SubmittedJob], **arguments: Any) -> JobRead:
        """``submit(uow, actor=…, runner=…, context=…, idempotency_key=…, **arguments)`` and
        the job as :func:`~service.api.job_waiting.submitted_job_answer` gives it."""
        submitted = await run_in_threadpool(
            functools.partial(
                submit,
                self.uow,
                actor=self.actor,
                runner=self.runner,
                context=self.audit_context,
                idempotency_key=self.idempotency_key,
                **arguments,
            )
        )
        return await submitted_job_answer(
            self.request, self.response, self.uow, self.actor, submitted, self.prefer
        )

    async def run(
        self,
        quote: Callable[..., Quote],
        read: Callable[[Quote], BaseModel],
        submit: Callable[..., SubmittedJob],
        **arguments: Any,
    ) -> JobRead | JSONResponse:
        """The quote under ``?dry_run=true``, else the submitted job."""
        if self.dry_run:
            return await self.quote(quote, read, **arguments)
        return await self.submit(submit, **arguments)


ChargedJobCallDep = Annotated[ChargedJobCall, Depends()]
