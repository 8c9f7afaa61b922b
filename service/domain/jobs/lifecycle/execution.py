"""The worker side: :func:`execute_job` claims a queued job, runs its kind's handler, holds
what the run spent to the ledger's charge (:func:`check_release`) and stores the release with
the job's success in one transaction; anything else ends the job ``cancelled`` or ``failed``
with a fixed problem, never refunded.

A plain function of a unit-of-work factory and a job id, so any runner
(:mod:`service.runtime.runner`, :mod:`service.runtime.queue_runner`) can call it. It never
raises for a job's own failure: the outcome is recorded on the job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from service.db.base import utcnow
from service.db.models import Dataset, Evaluation, Job, LedgerCharge, Model
from service.db.uow import UnitOfWorkFactory
from service.domain.errors import NotFoundError
from service.domain.jobs.lifecycle.problems import PublicJobError, job_problem
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, from_units, to_units
from service.domain.randomness import Randomness
from service.dp import ConvergenceError, FitResult
from service.dp import fit as dp_fit

logger = logging.getLogger(__name__)


#: Seconds between two progress writes (each also reads whether a cancel was requested).
DEFAULT_PROGRESS_INTERVAL: Final[float] = 0.2

#: ``service.dp.fit``'s signature, injectable for tests.
FitFunction = Callable[..., FitResult]


class JobCancelledError(Exception):
    """Raised from the progress callback when a cancel was requested: the fit stops there."""


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
    #: The typed plan stored at submission (JSON form; None for a job without one): the
    #: handler runs it and re-derives it only as a check that must agree.
    plan: dict[str, Any] | None = None

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
    kind to its :data:`JobHandler`; the composition root (:mod:`service.runtime.worker`) registers
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
            plan=None if job.plan is None else dict(job.plan),
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
