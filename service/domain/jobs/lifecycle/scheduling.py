"""What the job domain needs from a runner (issue 27 §3): schedule a committed, queued
job; optionally enqueue it inside the charging transaction, run it on the API process, or
refuse it above a work cap. Plus the per-job facts a runner schedules by (its owner, whether
it needs the API process)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from service.db.uow import UnitOfWork, UnitOfWorkFactory


class JobScheduler(Protocol):
    """What the domain needs from a job runner: schedule a committed, queued job."""

    def submit(self, job_id: str) -> None: ...


@runtime_checkable
class TransactionalScheduler(JobScheduler, Protocol):
    """A runner whose queue lives in the database: the job is enqueued inside the transaction
    that stages it and commits its charge, so both commit or neither does."""

    def enqueue_in_transaction(self, uow: UnitOfWork, job_id: str) -> None: ...


@runtime_checkable
class ApiProcessScheduler(JobScheduler, Protocol):
    """A runner that can run a chosen job on a thread of this API process, the one serving
    the HTTP endpoints, instead of wherever its other jobs run.

    Some jobs need the memory of the API process: a federated fit over remote contributions
    talks to the site nodes through the in-process task exchange that the node endpoints
    serve (:mod:`service.domain.nodes.exchange`). The in-process pool
    (:class:`service.runtime.runner.PoolJobRunner`) is one, with threads or processes. A runner
    that is not (the distributed queue, whose jobs run in other processes) is refused such a
    job at submission, before anything is charged, and so is this one when it runs in one of
    several API processes serving the same database (``PRIVFIT_WORKERS`` > 1:
    ``sole_api_process`` is False), since the nodes may poll another of them."""

    #: True when this is the only API process serving the database (the one nodes poll).
    sole_api_process: bool

    def submit_to_api_process(self, job_id: str) -> None:
        """Schedule the committed, queued job on a thread of this API process."""
        ...


@runtime_checkable
class WorkCappedScheduler(JobScheduler, Protocol):
    """A runner that refuses jobs whose estimated work (row-feature passes,
    :mod:`service.dp.analysis.work`) exceeds ``max_job_work`` (``PRIVFIT_MAX_JOB_WORK``; None: no
    cap), so that no single job can hold a worker for hours. The check is made at submission,
    before anything is charged (:func:`service.domain.jobs.charged.submit_charged_job`)."""

    max_job_work: float | None


def max_job_work(runner: JobScheduler) -> float | None:
    """The most work ``runner`` accepts in one job (None: no cap)."""
    return runner.max_job_work if isinstance(runner, WorkCappedScheduler) else None


def runs_jobs_in_the_api_process(runner: JobScheduler) -> bool:
    """Whether ``runner`` can run a job on a thread of the one API process nodes poll."""
    return isinstance(runner, ApiProcessScheduler) and bool(runner.sole_api_process)


#: Decides from a job's stored ``params`` whether a job of one kind needs the API process.
ApiProcessRule = Callable[[Mapping[str, Any]], bool]


def needs_api_process(
    uow_factory: UnitOfWorkFactory, job_id: str, *, rules: Mapping[str, ApiProcessRule]
) -> bool:
    """Whether the stored job ``job_id`` must run in the API process: the rule registered
    for its kind (``rules``, by ``Job.kind``; none: it may run anywhere) applied to its
    params. For a runner resubmitting a job it knows only by id (recovery after a restart);
    a new job's draft says it directly (:class:`service.domain.jobs.charged.JobDraft`)."""
    with uow_factory() as uow:
        job = uow.jobs.get(job_id)
        if job is None:
            return False
        rule = rules.get(job.kind)
        return rule is not None and rule(dict(job.params))


def job_owner(uow_factory: UnitOfWorkFactory, job_id: str) -> str | None:
    """The owner site of the stored job ``job_id`` (None when there is none): what a runner
    schedules fairly by (:mod:`service.runtime.fairness`)."""
    with uow_factory() as uow:
        job = uow.jobs.get(job_id)
        return None if job is None else job.owner_site_id
