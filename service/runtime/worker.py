"""Wiring between the runners and the domain's worker entry point: the composition root of
job execution.

:data:`JOB_HANDLERS` registers the handler of each job kind (a fit, a charged aggregation, a
federated fit) and :func:`run_job` is the domain's ``execute_job`` bound to them; a new kind of
job is one handler in its use-case module plus one line here. :data:`API_PROCESS_RULES` names
the kinds some of whose jobs must run in the API process (a federated fit over site nodes), with
the use case's rule saying which: the in-process runner resubmits those there after a restart.
:func:`interrupted_hooks` names what follows a job's failure by recovery, by kind: a federated
fit over site nodes queues an ``abort`` for each of its nodes
(:func:`service.domain.nodes.remote_fit.abort_interrupted_fit`).

:func:`build_runner` makes the app's default runner from the settings; :func:`job_function`
is what a worker process calls once to build its own engine and job function (it must be
importable and picklable: a spawned worker receives it by reference). A distributed engine
would call :func:`job_function` once per worker process too (e.g. on Celery's
``worker_process_init``) and run ``job(job_id)`` in its task.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.db.session import make_engine, make_sessionmaker
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.fits.run import run_fit_job
from service.domain.fits.tuning.run import run_tuned_fit_job
from service.domain.fits.tuning.submit import TUNED_FIT_KIND
from service.domain.jobs.lifecycle import (
    ApiProcessRule,
    InterruptedHook,
    JobHandler,
    JobOutcome,
    execute_job,
    job_owner,
    needs_api_process,
    recover_jobs,
    settle_lost_job,
)
from service.domain.models.evaluations import EVALUATION_KIND, run_evaluation_job
from service.domain.nodes.remote_fit import abort_interrupted_fit, reaches_nodes
from service.domain.randomness import Randomness
from service.domain.studies.charged_aggregations import run_aggregation_job
from service.domain.studies.federated.run import run_federated_job
from service.runtime.runner import JobFunction, JobRunner, PoolJobRunner, RunnerKind
from service.settings import Settings

__all__ = [
    "API_PROCESS_RULES",
    "JOB_HANDLERS",
    "WorkerConfig",
    "build_runner",
    "interrupted_hooks",
    "job_function",
    "run_job",
]

#: Which use case runs a job of each kind (``Job.kind``).
JOB_HANDLERS: Mapping[str, JobHandler] = {
    "fit": run_fit_job,
    "aggregate": run_aggregation_job,
    "federated": run_federated_job,
    EVALUATION_KIND: run_evaluation_job,
    TUNED_FIT_KIND: run_tuned_fit_job,
}

#: Which jobs of a kind must run in the API process, from their stored params (a new job's
#: draft says it itself: :class:`service.domain.jobs.charged.JobDraft`).
API_PROCESS_RULES: Mapping[str, ApiProcessRule] = {
    "federated": reaches_nodes,
}


def interrupted_hooks(randomness: Randomness) -> Mapping[str, InterruptedHook]:
    """What recovery does after failing a job of each kind (``recover_jobs``'s
    ``on_interrupted``): tell the nodes of a federated fit (``randomness`` derives the seed
    its terms carry in test mode)."""
    return {"federated": functools.partial(abort_interrupted_fit, randomness=randomness)}


def run_job(uow_factory: UnitOfWorkFactory, job_id: str, **options: Any) -> JobOutcome:
    """Run one queued job with the registered handlers (``execute_job``'s ``options``:
    ``randomness``, ``fit``, ``progress_interval``)."""
    return execute_job(uow_factory, job_id, handlers=JOB_HANDLERS, **options)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything a worker needs to run jobs on its own (picklable)."""

    database_url: str
    randomness: Randomness
    progress_interval: float
    busy_timeout_ms: int = 5000

    @classmethod
    def from_settings(cls, settings: Settings) -> WorkerConfig:
        return cls(
            database_url=settings.database_url,
            randomness=Randomness.from_settings(
                environment=settings.environment, test_seed=settings.test_seed
            ),
            progress_interval=settings.job_progress_interval,
            busy_timeout_ms=settings.sqlite_busy_timeout_ms,
        )


def _bind(config: WorkerConfig, uow_factory: UnitOfWorkFactory) -> JobFunction:
    return functools.partial(
        run_job,
        uow_factory,
        randomness=config.randomness,
        progress_interval=config.progress_interval,
    )


def job_function(config: WorkerConfig) -> JobFunction:
    """Build a worker's job function with its own engine (one connection is enough)."""
    engine = make_engine(config.database_url, busy_timeout_ms=config.busy_timeout_ms, pool_size=1)
    return _bind(config, functools.partial(UnitOfWork, make_sessionmaker(engine)))


def _is_memory_sqlite(url: str) -> bool:
    tail = url.split("://", 1)[-1]
    return (url.startswith("sqlite") and tail in {"", "/", "/:memory:"}) or "mode=memory" in url


def build_runner(settings: Settings, uow_factory: UnitOfWorkFactory) -> JobRunner:
    """The in-process runner: a pool of ``settings.job_workers`` worker
    processes (or threads with ``job_runner = "thread"``, and always for an in-memory SQLite
    database, which other processes cannot open). Jobs that need the API process (a federated
    fit over site nodes) run on threads of it either way. ``uow_factory`` is the API process's
    own, used for recovery, to read each job's owner site (the pool starts jobs fairly
    between sites) and by the threads."""
    config = WorkerConfig.from_settings(settings)
    if settings.job_runner == "queue":
        raise ValueError("the queue runner is service.runtime.queue_runner.QueueJobRunner")
    kind: RunnerKind = settings.job_runner
    if _is_memory_sqlite(settings.database_url):
        kind = "thread"
    in_api_process = functools.partial(_bind, config, uow_factory)
    worker = in_api_process if kind == "thread" else functools.partial(job_function, config)
    return PoolJobRunner(
        worker=worker,
        recover_jobs=functools.partial(
            recover_jobs, uow_factory, on_interrupted=interrupted_hooks(config.randomness)
        ),
        on_lost=functools.partial(settle_lost_job, uow_factory),
        workers=settings.job_workers,
        kind=kind,
        api_worker=in_api_process,
        needs_api_process=functools.partial(
            needs_api_process, uow_factory, rules=API_PROCESS_RULES
        ),
        sole_api_process=settings.workers == 1,
        site_of=functools.partial(job_owner, uow_factory),
        max_site_share=settings.max_site_worker_share,
        max_job_work=settings.max_job_work,
    )
