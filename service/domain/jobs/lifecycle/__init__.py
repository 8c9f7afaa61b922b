"""Jobs: the worker entry point :func:`execute_job`, cancellation, crash recovery (issue 4 item 3).

A job row moves through ``queued → running → succeeded | failed | cancelled`` (or straight
from ``queued`` to ``cancelled``). Every transition is one conditional UPDATE on the expected
current status, so a worker claiming a job, a user cancelling it and a recovery pass can race
without a job ending in two states, on SQLite and PostgreSQL alike.

Ledger semantics (docs/design.md §2): a job's charges were committed together with the queued job
(:mod:`service.domain.jobs.charged`) before any noise can be drawn, and nothing is released
that exceeds them (:func:`check_release`). A job cancelled while still queued is refunded in
the same transaction that cancels it. Once a worker has claimed a job it is
never refunded, whatever happens next: cancelled while running, failed, interrupted by a
crash. Its failure could itself reveal something about the data.

The worker entry point is a plain function of a unit-of-work factory and a job id, so any
runner (the in-process pool of :mod:`service.runtime.runner`, a Celery task later) can call it.
It never raises for a job's own failure: the outcome is recorded on the job.

The package, one module per concern (issue 27 §3): :mod:`.scheduling` (what a runner offers
the domain), :mod:`.problems` (what a failed job stores), :mod:`.reading` (get, list, cancel),
:mod:`.recovery` (after a crash or a silent worker) and :mod:`.execution` (claim, progress,
the release guard, :func:`execute_job`). Every name is re-exported here, so callers import
from ``service.domain.jobs.lifecycle`` as before.
"""

from __future__ import annotations

from service.domain.jobs.lifecycle.execution import (
    DEFAULT_PROGRESS_INTERVAL,
    Charged,
    ClaimedJob,
    FitFunction,
    JobCancelledError,
    JobContext,
    JobHandler,
    JobOutcome,
    Release,
    ReleaseExceedsChargeError,
    charged_amounts,
    check_release,
    execute_job,
)
from service.domain.jobs.lifecycle.problems import PublicJobError, job_problem
from service.domain.jobs.lifecycle.reading import (
    JobCharge,
    JobPage,
    JobView,
    cancel_job,
    get_job,
    job_charge,
    job_view,
    list_jobs,
    read_job_statistics,
)
from service.domain.jobs.lifecycle.recovery import (
    InterruptedHook,
    recover_jobs,
    settle_lost_job,
    settle_stalled_job,
)
from service.domain.jobs.lifecycle.scheduling import (
    ApiProcessRule,
    ApiProcessScheduler,
    JobScheduler,
    TransactionalScheduler,
    WorkCappedScheduler,
    job_owner,
    max_job_work,
    needs_api_process,
    runs_jobs_in_the_api_process,
)

__all__ = [
    "DEFAULT_PROGRESS_INTERVAL",
    "ApiProcessRule",
    "ApiProcessScheduler",
    "Charged",
    "ClaimedJob",
    "FitFunction",
    "InterruptedHook",
    "JobCancelledError",
    "JobCharge",
    "JobContext",
    "JobHandler",
    "JobOutcome",
    "JobPage",
    "JobScheduler",
    "JobView",
    "PublicJobError",
    "Release",
    "ReleaseExceedsChargeError",
    "TransactionalScheduler",
    "WorkCappedScheduler",
    "cancel_job",
    "charged_amounts",
    "check_release",
    "execute_job",
    "get_job",
    "job_charge",
    "job_owner",
    "job_problem",
    "job_view",
    "list_jobs",
    "max_job_work",
    "needs_api_process",
    "read_job_statistics",
    "recover_jobs",
    "runs_jobs_in_the_api_process",
    "settle_lost_job",
    "settle_stalled_job",
]
