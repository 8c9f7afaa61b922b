"""Crash recovery: a job left ``running`` by a dead worker or process is failed
(``job-interrupted``, budget kept spent: noise may already have been drawn); a job still
``queued`` may be submitted again. Each transition is one conditional UPDATE, so several
processes noticing at once settle a job once."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from service.db.base import utcnow
from service.db.uow import UnitOfWorkFactory
from service.domain.jobs.lifecycle.problems import job_problem

logger = logging.getLogger(__name__)


#: What follows, for a job of one kind, its failure by recovery: called with the job's id and
#: stored params once the failure is committed (a federated fit over site nodes queues an abort
#: for each node). Best effort: what it raises is logged, and recovery goes on.
InterruptedHook = Callable[[str, Mapping[str, Any]], object]


def recover_jobs(
    uow_factory: UnitOfWorkFactory,
    *,
    on_interrupted: Mapping[str, InterruptedHook] | None = None,
) -> list[str]:
    """On start-up: fail every job left ``running`` by a crash (budget kept spent) and return
    the ids of the jobs still ``queued``, to be submitted again.

    ``on_interrupted`` (by ``Job.kind``): called for each job this pass failed, after the
    commit; a job already failed (a second recovery) is not passed again.

    Only safe where this process's runner is the only one executing jobs (the embedded
    default); see ``job_recovery`` in the settings.
    """
    hooks = on_interrupted or {}
    follow_ups: list[tuple[InterruptedHook, str, dict[str, Any]]] = []
    with uow_factory() as uow:
        now = utcnow()
        interrupted = 0
        for job_id in uow.jobs.ids_with_status("running"):
            if not uow.jobs.transition(
                job_id,
                expected="running",
                status="failed",
                finished_at=now,
                error=job_problem("job-interrupted"),
            ):
                continue
            interrupted += 1
            job = uow.jobs.get(job_id) if hooks else None
            if job is not None and job.kind in hooks:
                follow_ups.append((hooks[job.kind], job_id, dict(job.params or {})))
        queued = list(uow.jobs.ids_with_status("queued"))
        uow.commit()
    if interrupted:
        logger.warning("marked %d interrupted job(s) failed; their budget stays spent", interrupted)
    for hook, job_id, params in follow_ups:
        try:
            hook(job_id, params)
        except Exception:
            logger.exception("the follow-up of interrupted job %s failed", job_id)
    return queued


def settle_lost_job(uow_factory: UnitOfWorkFactory, job_id: str) -> bool:
    """A job's worker died or raised: fail it if it had started (budget kept spent).

    Returns True when the job never started (still ``queued``) and may be submitted again.
    """
    with uow_factory() as uow:
        if uow.jobs.transition(
            job_id,
            expected="running",
            status="failed",
            finished_at=utcnow(),
            error=job_problem("job-interrupted"),
        ):
            uow.commit()
            return False
        job = uow.jobs.get(job_id)
        return job is not None and job.status == "queued"


def settle_stalled_job(uow_factory: UnitOfWorkFactory, job_id: str) -> str:
    """The worker running ``job_id`` went silent: fail the job if it had started (budget kept
    spent, ``job-interrupted``) and say what became of it: ``"interrupted"`` (failed now),
    ``"queued"`` (it never started: may run elsewhere), ``"missing"``, or the final status it
    already had. One conditional UPDATE: safe when several processes notice at once."""
    with uow_factory() as uow:
        if uow.jobs.transition(
            job_id,
            expected="running",
            status="failed",
            finished_at=utcnow(),
            error=job_problem("job-interrupted"),
        ):
            uow.commit()
            return "interrupted"
        job = uow.jobs.get(job_id)
        return "missing" if job is None else job.status
