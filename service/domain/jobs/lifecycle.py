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
runner (the in-process pool of :mod:`service.jobs.runner`, a Celery task later) can call it.
It never raises for a job's own failure: the outcome is recorded on the job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from service.db.base import utcnow
from service.db.job_stats import JobStatistics
from service.db.models import Dataset, Evaluation, Job, LedgerCharge, Model
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.errors import ConflictError, NotFoundError
from service.domain.ids import looks_like_id
from service.domain.ledger import budgets
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, from_units, to_units
from service.domain.randomness import Randomness
from service.dp import ConvergenceError, FitResult
from service.dp import fit as dp_fit

__all__ = [
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
    "settle_lost_job",
    "settle_stalled_job",
]

logger = logging.getLogger(__name__)

#: Seconds between two progress writes (each also reads whether a cancel was requested).
DEFAULT_PROGRESS_INTERVAL: Final[float] = 0.2

#: ``service.dp.fit``'s signature, injectable for tests.
FitFunction = Callable[..., FitResult]


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
    (:class:`service.jobs.runner.PoolJobRunner`) is one, with threads or processes. A runner
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
    cap),
    so that no single job can hold a worker for hours. The check is made at submission,
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
    schedules fairly by (:mod:`service.jobs.fairness`)."""
    with uow_factory() as uow:
        job = uow.jobs.get(job_id)
        return None if job is None else job.owner_site_id


class JobCancelledError(Exception):
    """Raised from the progress callback when a cancel was requested: the fit stops there."""


@dataclass(frozen=True, slots=True)
class JobCharge:
    """What a job charged to one dataset's budget."""

    dataset_id: str
    epsilon: float
    delta: float
    state: str


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as its owner sees it: the row and its ledger charges."""

    job: Job
    charges: tuple[JobCharge, ...]


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of jobs."""

    items: Sequence[JobView]
    total: int


def job_charge(row: LedgerCharge) -> JobCharge:
    """What a ledger row says about a job's charge."""
    return JobCharge(
        dataset_id=row.dataset_id,
        epsilon=from_units(row.epsilon_units, EPSILON_UNIT),
        delta=from_units(row.delta_units, DELTA_UNIT),
        state=row.state,
    )


def job_view(uow: UnitOfWork, job: Job) -> JobView:
    """``job`` with its ledger charges, read in the caller's open transaction."""
    return JobView(
        job=job, charges=tuple(job_charge(c) for c in uow.ledger.charges_for_job(job.id))
    )


# --- problems stored on failed jobs ------------------------------------------------------

_PROBLEMS: Final[dict[str, tuple[str, str]]] = {
    "job-interrupted": (
        "Job interrupted",
        "the worker running this job stopped (the service restarted or the worker died) "
        "before the job finished; its privacy budget stays spent because noise may already "
        "have been drawn",
    ),
    "did-not-converge": (
        "Fit did not converge",
        "the optimiser did not reach the exact minimiser that the mechanism's privacy proof "
        "requires, so no model was released; the budget stays spent. A larger regularization "
        "usually helps",
    ),
    "invalid-data": (
        "Data rejected by the mechanism",
        "the stored data does not meet the mechanism's preconditions; no model was released "
        "and the budget stays spent",
    ),
    "dataset-unavailable": (
        "Dataset unavailable",
        "the dataset was deleted before the job could read it; the budget stays spent",
    ),
    "release-exceeds-charge": (
        "Release exceeds the charge",
        "the run would have released a result whose privacy cost on a dataset exceeds what "
        "the ledger charged for this job, so nothing was released; the budget stays spent. "
        "Quote the job id when reporting it",
    ),
    "job-failed": (
        "Job failed",
        "the job failed unexpectedly; no model was released and the budget stays spent. Quote "
        "the job id when reporting it",
    ),
}


class PublicJobError(Exception):
    """A job failure whose reason is public and data-free (issue 15: a node refused a task, or
    a node stayed silent past its deadline): stored on the job as ``{type, title, detail}``."""

    def __init__(self, slug: str, title: str, detail: str) -> None:
        super().__init__(detail)
        self.slug = slug
        self.title = title
        self.detail = detail

    def problem(self) -> dict[str, Any]:
        return {"type": self.slug, "title": self.title, "detail": self.detail}


def job_problem(slug: str) -> dict[str, Any]:
    """The problem object stored on a failed job: fixed texts, never data or internals."""
    title, detail = _PROBLEMS[slug]
    return {"type": slug, "title": title, "detail": detail}


# --- reading and cancelling (API side) ---------------------------------------------------


def _visible(job: Job | None, actor: Principal) -> Job:
    if job is None or not actor.owns(job.owner_site_id):
        raise NotFoundError("job")
    return job


def get_job(uow: UnitOfWork, *, job_id: str, actor: Principal) -> JobView:
    """A job of the caller's site; any other job is 404 (for the admin, every job)."""
    if not looks_like_id(job_id):
        raise NotFoundError("job")
    with uow:
        return job_view(uow, _visible(uow.jobs.get(job_id), actor))


def list_jobs(uow: UnitOfWork, *, actor: Principal, limit: int, offset: int) -> JobPage:
    """The caller's jobs, newest first (403 for the admin, which owns none)."""
    owner = actor.require_site()
    with uow:
        return JobPage(
            items=[
                job_view(uow, job)
                for job in uow.jobs.list_page(owner_site_id=owner, limit=limit, offset=offset)
            ],
            total=uow.jobs.count(owner_site_id=owner),
        )


def cancel_job(uow: UnitOfWork, *, job_id: str, actor: Principal) -> JobView:
    """Cancel a job.

    Queued: cancelled now and its charge refunded, in one transaction. Running: a cancel is
    requested; the worker stops at its next progress report and the job ends ``cancelled``
    without a refund. Finished: :class:`ConflictError`. Returns the job as it now stands.
    """
    if not looks_like_id(job_id):
        raise NotFoundError("job")
    with uow:
        job = _visible(uow.jobs.get(job_id), actor)
        now = utcnow()
        if uow.jobs.transition(job_id, expected="queued", status="cancelled", finished_at=now):
            budgets.refund(uow, job_id=job_id)
            uow.commit()
        elif uow.jobs.request_cancel(job_id):
            uow.commit()
        else:
            # Neither queued nor running any more (possibly a moment ago): finished.
            uow.rollback()
            job = _visible(uow.jobs.get(job_id, fresh=True), actor)
            raise ConflictError(f"the job has already finished ({job.status}); nothing to cancel")
        return job_view(uow, _visible(uow.jobs.get(job_id, fresh=True), actor))


def read_job_statistics(uow_factory: UnitOfWorkFactory, bounds: Sequence[float]) -> JobStatistics:
    """Deployment-wide job figures for operations (no dataset or site is named in them)."""
    with uow_factory() as uow:
        return uow.job_statistics(bounds)


# --- crash recovery ------------------------------------------------------------------------


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


# --- the worker ----------------------------------------------------------------------------


class _Progress:
    """The fit's progress callback: throttled writes of the fraction done, each of which also
    reads whether a cancel was requested (then raises :class:`JobCancelledError`)."""

    def __init__(
        self,
        uow_factory: UnitOfWorkFactory,
        job_id: str,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._uow_factory = uow_factory
        self._job_id = job_id
        self._interval = interval
        self._clock = clock
        # The claim recorded progress 0 and the success records 1: only fits that run longer
        # than one interval write (and check for a cancel) in between.
        self._last = clock()

    def __call__(self, fraction: float) -> None:
        now = self._clock()
        if fraction >= 1.0 or now - self._last < self._interval:
            return
        self._last = now
        self.sync(fraction)

    def sync(self, fraction: float | None) -> None:
        """Record ``fraction`` (None: only check) and raise if a cancel was requested."""
        with self._uow_factory() as uow:
            value = None if fraction is None else min(max(float(fraction), 0.0), 1.0)
            cancel = uow.jobs.report_progress(self._job_id, value)
            uow.commit()
        if cancel:
            raise JobCancelledError(self._job_id)


def _finish(
    uow_factory: UnitOfWorkFactory,
    job_id: str,
    status: str,
    slug: str | None,
    problem: dict[str, Any] | None = None,
) -> None:
    with uow_factory() as uow:
        uow.jobs.transition(
            job_id,
            expected="running",
            status=status,
            finished_at=utcnow(),
            error=problem if problem is not None else None if slug is None else job_problem(slug),
        )
        uow.commit()


@dataclass(frozen=True, slots=True)
class Charged:
    """What the ledger holds as charged (state ``charged``) to one dataset for one job, in
    exact ledger units (see :mod:`service.domain.ledger.units`)."""

    dataset_id: str
    epsilon_units: int
    delta_units: int

    @classmethod
    def of(cls, row: LedgerCharge) -> Charged:
        return cls(row.dataset_id, int(row.epsilon_units), int(row.delta_units))

    @property
    def epsilon(self) -> float:
        return from_units(self.epsilon_units, EPSILON_UNIT)

    @property
    def delta(self) -> float:
        return from_units(self.delta_units, DELTA_UNIT)


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job a worker has just claimed (``queued → running``), as its handler sees it."""

    id: str
    kind: str
    owner_site_id: str
    dataset_id: str | None
    params: dict[str, Any]
    #: The job's dataset row, read in the claim's own transaction (None without a dataset
    #: or when it no longer exists), so a fit needs no further read when its design is cached.
    dataset: Dataset | None = None
    #: The ledger's charges for this job by dataset id, read in the claim's transaction (a
    #: claimed job is never refunded, so they cannot change afterwards). Privacy records
    #: state these as what was charged; :func:`check_release` holds the run to them.
    charges: Mapping[str, Charged] = field(default_factory=dict)

    def live_dataset(self) -> Dataset:
        """The job's dataset as the claim read it; NotFound when it is gone or deleted."""
        if self.dataset is None or self.dataset.deleted_at is not None:
            raise NotFoundError("dataset")
        return self.dataset


@dataclass(frozen=True, slots=True)
class Release:
    """What a handler would release: the model (not yet stored) and what the run actually
    spent on each dataset it read, ``{dataset_id: (ε, δ)}`` ((0, 0) for a run that claims no
    privacy), taken from the mechanism's own report of the run, not from the job's params."""

    model: Model | Evaluation
    spent: Mapping[str, tuple[float, float]]


class ReleaseExceedsChargeError(Exception):
    """The run spent more on a dataset than the ledger charged for the job (or read a dataset
    the job did not charge at all): nothing may be released."""


def check_release(charges: Mapping[str, Charged], spent: Mapping[str, tuple[float, float]]) -> None:
    """Refuse a release whose run exceeds its charge on any dataset.

    For every dataset d the run read, with actual cost (ε_d, δ_d): the ledger must hold a
    charge for this job on d with ⌈ε_d / u_ε⌉ ≤ charged ε-units and ⌈δ_d / u_δ⌉ ≤ charged
    δ-units, the same upward rounding the charge itself used, so a run that spends exactly
    its calibration passes and one that spends a single unit more does not. Basic sequential
    composition on the ledger is only sound if every release is covered by its charge; a
    non-finite or negative cost is never covered. Raises :class:`ReleaseExceedsChargeError`.
    """
    for dataset_id, (epsilon, delta) in spent.items():
        charge = charges.get(dataset_id)
        if charge is None:
            raise ReleaseExceedsChargeError(f"dataset {dataset_id} was not charged for this job")
        try:
            epsilon_units = to_units(float(epsilon), EPSILON_UNIT, "up")
            delta_units = to_units(float(delta), DELTA_UNIT, "up")
        except ValueError as exc:
            raise ReleaseExceedsChargeError(f"dataset {dataset_id}: cost {exc}") from None
        if epsilon_units > charge.epsilon_units or delta_units > charge.delta_units:
            raise ReleaseExceedsChargeError(
                f"dataset {dataset_id}: the run spent ({epsilon!r}, {delta!r}), more than the "
                f"charged ({charge.epsilon!r}, {charge.delta!r})"
            )


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a job handler may use besides the database: the noise source, the progress
    callback (which raises :class:`JobCancelledError` once a cancel is requested) and the fit
    function (``service.dp.fit``, injectable for tests)."""

    randomness: Randomness
    progress: Callable[[float], None]
    fit: FitFunction


#: Runs one claimed job of a kind and returns what it would release (not yet stored): a
#: model or a private evaluation (whose id is the job's), with what the run spent. It reads
#: what it needs through the factory; raising fails the job (see :func:`execute_job`).
JobHandler = Callable[[UnitOfWorkFactory, ClaimedJob, JobContext], "Release"]


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """How a worker's run of a job ended: the final status (or the status the job already
    had when it was not queued) and, for a success, the job row exactly as the run committed
    it, so a request waiting for the job can answer without reading it back. Its charges are
    the ones the job was created with: they change only when a queued job is cancelled (the
    refund), never for a job that ran, so the waiting request already holds them."""

    status: str
    job: Job | None = None


def execute_job(
    uow_factory: UnitOfWorkFactory,
    job_id: str,
    *,
    handlers: Mapping[str, JobHandler],
    randomness: Randomness | None = None,
    fit: FitFunction = dp_fit,
    progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
) -> JobOutcome:
    """Run one queued job to its end; returns its outcome (with the status it already had
    when it was not queued: a job is claimed once, by one worker). ``handlers`` maps each job
    kind to its :data:`JobHandler`; the composition root (:mod:`service.jobs.worker`) registers
    them, so this module knows no use case that enqueues jobs.

    Claim (``queued → running``, attempt + 1) → the handler of the job's kind (a fit, an
    aggregation, a federated fit) draws its noise from ``randomness`` (the CSPRNG by default)
    and returns the model with what the run spent → :func:`check_release` holds that spend to the
    ledger's charge for the job (a run exceeding it fails ``release-exceeds-charge`` with nothing
    stored) → store the model with its privacy record and mark the job succeeded, in one
    transaction. A cancel seen at a progress report, or after the work, ends the job
    ``cancelled``; errors end it ``failed`` with a fixed problem. None of these refund the
    budget, and nothing is released unless the whole job succeeded.
    """
    randomness = randomness or Randomness()
    with uow_factory() as uow:
        job = uow.jobs.claim(job_id, started_at=utcnow())
        if job is None:
            current = uow.jobs.get(job_id)
            return JobOutcome("missing" if current is None else current.status)
        dataset = None if job.dataset_id is None else uow.datasets.get(job.dataset_id)
        charges = {
            row.dataset_id: Charged.of(row)
            for row in uow.ledger.charges_for_job(job.id, state="charged")
        }
        uow.commit()
        claimed = ClaimedJob(
            id=job.id,
            kind=job.kind,
            owner_site_id=job.owner_site_id,
            dataset_id=job.dataset_id,
            params=dict(job.params),
            dataset=dataset,
            charges=charges,
        )
    context = JobContext(
        randomness=randomness,
        progress=_Progress(uow_factory, job_id, progress_interval),
        fit=fit,
    )
    try:
        handler = handlers.get(claimed.kind)
        if handler is None:
            raise LookupError(f"no handler for jobs of kind {claimed.kind!r}")
        release = handler(uow_factory, claimed, context)
        check_release(claimed.charges, release.spent)
        released = release.model
        with uow_factory() as uow:
            if isinstance(released, Evaluation):
                uow.evaluations.add(released)
                model_id = None
            else:
                model_id = uow.models.add(released).id
            done = uow.jobs.succeed(job_id, model_id=model_id, finished_at=utcnow())
            if done is not None:
                uow.commit()
                return JobOutcome("succeeded", done)
        # The job was cancelled (or settled by recovery) while the model was being stored.
        _finish(uow_factory, job_id, "cancelled", None)
        return JobOutcome("cancelled")
    except JobCancelledError:
        _finish(uow_factory, job_id, "cancelled", None)
        return JobOutcome("cancelled")
    except ReleaseExceedsChargeError:
        logger.error("job %s: nothing released, the run exceeds its charge", job_id)
        _finish(uow_factory, job_id, "failed", "release-exceeds-charge")
        return JobOutcome("failed")
    except PublicJobError as exc:
        logger.warning("job %s failed: %s", job_id, exc.detail)
        _finish(uow_factory, job_id, "failed", exc.slug, exc.problem())
        return JobOutcome("failed")
    except ConvergenceError:
        _finish(uow_factory, job_id, "failed", "did-not-converge")
        return JobOutcome("failed")
    except NotFoundError:
        _finish(uow_factory, job_id, "failed", "dataset-unavailable")
        return JobOutcome("failed")
    except ValueError:
        _finish(uow_factory, job_id, "failed", "invalid-data")
        return JobOutcome("failed")
    except Exception:
        logger.exception("job %s failed", job_id)
        _finish(uow_factory, job_id, "failed", "job-failed")
        return JobOutcome("failed")


def charged_amounts(job: ClaimedJob) -> dict[str, tuple[float, float]]:
    """The ledger's charges of ``job`` as ``{dataset_id: (ε, δ)}``, for its privacy record."""
    return {d: (c.epsilon, c.delta) for d, c in job.charges.items()}
