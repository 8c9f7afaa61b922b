"""Job runners: where queued jobs execute (docs/design.md §1 ``jobs/``, §6).

A runner only *schedules*. The work itself is a plain function of the domain,
``service.domain.jobs.lifecycle.execute_job(uow_factory, job_id, handlers=...)`` (bound to the
registered
handlers as :func:`service.runtime.worker.run_job`), which claims the job in the database, runs it,
checks the release against the job's charge, stores the model and records the outcome.
Everything a runner knows about a job is its id, so a distributed task engine plugs in by
implementing :class:`JobRunner` with a task that calls the same function in its worker:
:mod:`service.runtime.queue_runner` does so on procrastinate (``PRIVFIT_JOB_RUNNER=queue``). Another
runner is installed by setting ``app.state.job_runner_factory`` (``(settings, uow_factory) ->
JobRunner``) before the app starts; the lifespan then starts, recovers with and shuts down that
runner instead of the default (``tests/api/test_jobs.py`` plugs in a synchronous inline runner).

The default, :class:`PoolJobRunner`, executes jobs inside the API process's own pool:

* ``kind="process"`` (default): a :class:`~concurrent.futures.ProcessPoolExecutor` started
  with the ``spawn`` context, so no worker inherits the parent's database connections, locks or
  threads. Each worker builds its own engine from the database URL once (the pool
  initializer) and keeps it for every job it runs. Fits partly hold the GIL
  (``scipy.optimize`` loops in Python), so processes keep the API responsive while they run.
* ``kind="thread"``: a :class:`~concurrent.futures.ThreadPoolExecutor` sharing the API's engine;
  for in-memory SQLite, debugging and tests.

Whatever the kind, a job the domain says needs the API process (a federated fit over site
nodes, whose task exchange lives in this process's memory) is handed over with
:meth:`PoolJobRunner.submit_to_api_process` and runs on a thread of this process: the thread
pool itself with ``kind="thread"``, a second, small thread pool beside the process pool with
``kind="process"``. Those jobs are tracked, awaited, cancelled (through the database, as every
job), recovered (``needs_api_process`` tells the runner where a job it knows only by id goes)
and dropped at shutdown exactly like the pool's own.

Fair use between sites (issue 26 §4, :mod:`service.runtime.fairness`): a job goes to the pool
only when a slot is free, and the runner picks which: round-robin between the owner sites of
the queued jobs, never one of a site already holding ⌊``max_site_share`` × slots⌋ (at least
one) running jobs. ``site_of`` reads a job's owner site. The API-process threads are a second
set of slots under the same rule. ``max_job_work`` is the cap on one job's estimated work
that the domain holds every submission to (:class:`~service.domain.jobs.lifecycle.
WorkCappedScheduler`).

A worker process that dies (killed, out of memory) breaks a process pool: every job it held is
handed to ``on_lost`` in the API process (the domain marks a started job failed, budget kept
spent, and says whether a still-queued job should be resubmitted), and a fresh pool replaces
the broken one.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from service.runtime.fairness import Waiting, choose_next, start_tag

__all__ = [
    "JobFunction",
    "JobListener",
    "JobRunner",
    "LostJobHandler",
    "PlacementFunction",
    "PoolJobRunner",
    "RecoverFunction",
    "RunnerKind",
    "SiteFunction",
    "WorkerFactory",
]

logger = logging.getLogger(__name__)

#: Runs one job, given its id, to completion (recording success or failure itself); what it
#: returns is handed to the job's listeners (:meth:`PoolJobRunner.notify_when_done`).
JobFunction = Callable[[str], object]
#: Told that a job's execution ended, with what the job function returned (None when it
#: raised or never ran).
JobListener = Callable[[object], None]
#: Builds the job function inside a worker. Must be picklable for ``kind="process"``
#: (a module-level function, or a ``functools.partial`` of one with picklable arguments).
WorkerFactory = Callable[[], JobFunction]
#: Called in the API process for a job whose worker died or raised; returns True when the job
#: never started and should be submitted again.
LostJobHandler = Callable[[str], bool]
#: Settles jobs a crash left behind and returns the ids of those to submit again.
RecoverFunction = Callable[[], Sequence[str]]
#: Says whether the job with this id must run in the API process (read from the job).
PlacementFunction = Callable[[str], bool]
#: The owner site of the job with this id (None when the job is gone).
SiteFunction = Callable[[str], "str | None"]

RunnerKind = Literal["process", "thread"]

#: How often a job whose worker died before claiming it is submitted again.
MAX_RESUBMITS = 3


@runtime_checkable
class JobRunner(Protocol):
    """Schedules jobs by id. Implementations never touch job state themselves."""

    def start(self) -> None:
        """Acquire workers (idempotent). Called once by the app lifespan before serving."""

    def submit(self, job_id: str) -> None:
        """Schedule the job; returns at once. The job must already be committed as queued."""

    def recover(self) -> Sequence[str]:
        """Settle jobs left queued or running by a crash; resubmit the queued ones.

        Returns the ids that were resubmitted.
        """

    def shutdown(self, *, wait: bool = True) -> None:
        """Stop accepting jobs, drop the ones not yet started (they stay queued in the
        database and are recovered on the next start) and, with ``wait``, let the running
        ones finish."""


# --- process-pool worker side ------------------------------------------------------------

_worker_job: JobFunction | None = None


def _init_worker(factory: WorkerFactory) -> None:
    """Pool initializer, run once in each spawned worker: build its own job function."""
    global _worker_job
    _worker_job = factory()


def _run_in_worker(job_id: str) -> object:
    if _worker_job is None:  # pragma: no cover - the initializer always runs first
        raise RuntimeError("job worker not initialised")
    return _worker_job(job_id)


def _warm_up() -> None:
    """A no-op task: makes the pool spawn (and initialise) a worker ahead of the first job."""


# --- fair slots ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Queued:
    job_id: str
    site: str
    tag: int


@dataclass(slots=True)
class _Slots:
    """One set of ``slots`` job slots (the pool, or the API-process threads) with the jobs
    waiting for them; every field is guarded by the runner's lock."""

    slots: int
    waiting: list[_Queued] = field(default_factory=list)
    running: dict[str, int] = field(default_factory=dict)
    #: V: the start tag of the job started last.
    virtual_time: int = 0
    #: The start tag of each site's last job still queued or running.
    last_tag: dict[str, int] = field(default_factory=dict)

    def enqueue(self, job_id: str, site: str) -> None:
        tag = start_tag(self.virtual_time, self.last_tag.get(site))
        self.last_tag[site] = tag
        self.waiting.append(_Queued(job_id, site, tag))

    def pop_next(self, share: float) -> _Queued | None:
        index = choose_next(
            [Waiting(q.site, q.tag) for q in self.waiting],
            self.running,
            slots=self.slots,
            share=share,
        )
        if index is None:
            return None
        job = self.waiting.pop(index)
        self.running[job.site] = self.running.get(job.site, 0) + 1
        self.virtual_time = job.tag
        return job

    def release(self, site: str) -> None:
        left = self.running.get(site, 0) - 1
        if left > 0:
            self.running[site] = left
        else:
            self.running.pop(site, None)
            if not any(q.site == site for q in self.waiting):
                self.last_tag.pop(site, None)


# --- the default runner ------------------------------------------------------------------


class PoolJobRunner:
    """Runs jobs in a pool of worker processes (default) or threads of the API process.

    ``worker`` builds the job function (in each worker process, or once for threads);
    ``recover_jobs`` and ``on_lost`` are the domain's crash-recovery steps, run in the API
    process. ``warm`` starts every worker in :meth:`start` so the first job does not pay for
    interpreter start-up and imports.

    Jobs that need the API process (:meth:`submit_to_api_process`) run on threads of this
    process with the job function ``api_worker`` builds (default: ``worker``), at most
    ``api_workers`` at a time (default: ``workers``); with ``kind="thread"`` they share the
    one thread pool. ``needs_api_process`` says, at recovery, which queued jobs those are.

    Jobs wait in the runner (not in the executor) until :mod:`service.runtime.fairness` starts
    them: ``site_of`` names each job's owner site (default: one site for all, i.e. first in,
    first out) and ``max_site_share`` caps the slots one site holds. ``max_job_work`` is only
    carried for the domain's submission check.
    """

    def __init__(
        self,
        *,
        worker: WorkerFactory,
        recover_jobs: RecoverFunction,
        on_lost: LostJobHandler,
        workers: int = 1,
        kind: RunnerKind = "process",
        start_method: Literal["spawn", "forkserver"] = "spawn",
        warm: bool = True,
        api_worker: WorkerFactory | None = None,
        api_workers: int | None = None,
        needs_api_process: PlacementFunction | None = None,
        sole_api_process: bool = True,
        site_of: SiteFunction | None = None,
        max_site_share: float = 1.0,
        max_job_work: float | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if api_workers is not None and api_workers < 1:
            raise ValueError(f"api_workers must be >= 1, got {api_workers}")
        if kind not in ("process", "thread"):
            raise ValueError(f"kind must be 'process' or 'thread', got {kind!r}")
        if not 0.0 < max_site_share <= 1.0:
            raise ValueError(f"max_site_share must lie in (0, 1], got {max_site_share}")
        self._worker = worker
        self._recover_jobs = recover_jobs
        self._on_lost = on_lost
        self._workers = workers
        self.kind: RunnerKind = kind
        #: False when several API processes serve the database (the nodes may poll another).
        self.sole_api_process = sole_api_process
        self._start_method = start_method
        self._warm = warm
        self._api_worker = api_worker if api_worker is not None else worker
        self._api_workers = api_workers if api_workers is not None else workers
        self._needs_api_process = needs_api_process
        self._lock = threading.Lock()
        self._executor: Executor | None = None
        #: With ``kind="process"``: the threads of this process for jobs that need it.
        self._api_executor: ThreadPoolExecutor | None = None
        self._thread_job: JobFunction | None = None
        self._pending: dict[Future[object], tuple[str, Executor]] = {}
        self._closed = False
        self._resubmits: dict[str, int] = {}
        self._listeners: dict[str, list[JobListener]] = {}
        self._site_of = site_of
        self._share = max_site_share
        #: The cap on one job's estimated work (row-feature passes) the domain enforces.
        self.max_job_work = max_job_work
        self._pool_slots = _Slots(workers)
        self._api_slots = _Slots(self._api_workers)
        #: Which slots a started job holds, and its site, by future.
        self._holding: dict[Future[object], tuple[_Slots, str]] = {}
        #: Broken pools replaced under the lock, shut down once it is released.
        self._broken: list[Executor] = []

    # -- lifecycle --

    def start(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the job runner was shut down")
            if self._executor is None:
                self._executor = self._new_executor()

    def shutdown(self, *, wait: bool = True) -> None:
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
            api_executor, self._api_executor = self._api_executor, None
            # Jobs still waiting for a slot stay queued in the database (recovered next start).
            dropped = [
                q.job_id for lane in (self._pool_slots, self._api_slots) for q in lane.waiting
            ]
            self._pool_slots.waiting.clear()
            self._api_slots.waiting.clear()
            listeners = [f for job_id in dropped for f in self._listeners.pop(job_id, [])]
        for listener in listeners:
            _tell(listener, None)
        # The API-process threads drop their jobs not yet started before the pool is waited
        # for (a thread pool may be shut down again, to wait, once it has been told to stop).
        if api_executor is not None:
            api_executor.shutdown(wait=False, cancel_futures=True)
        if executor is not None:
            executor.shutdown(wait=wait, cancel_futures=True)
        if api_executor is not None and wait:
            api_executor.shutdown(wait=True)

    def recover(self) -> list[str]:
        resubmitted: list[str] = []
        for job_id in self._recover_jobs():
            if self._needs_api_process is not None and self._needs_api_process(job_id):
                self.submit_to_api_process(job_id)
            else:
                self.submit(job_id)
            resubmitted.append(job_id)
        if resubmitted:
            logger.info("resubmitted %d queued job(s) after restart", len(resubmitted))
        return resubmitted

    # -- scheduling --

    def submit(self, job_id: str) -> None:
        self._enqueue(job_id, api_process=False)

    def submit_to_api_process(self, job_id: str) -> None:
        """Schedule the job on a thread of this (the API) process, whatever ``kind``: for a
        job that needs this process's memory (the site nodes' task exchange)."""
        self._enqueue(job_id, api_process=self.kind != "thread")

    def _enqueue(self, job_id: str, *, api_process: bool) -> None:
        """Queue the job for its slots (read its site first, outside the lock) and start
        whatever the fairness rule lets start."""
        site = "" if self._site_of is None else self._site_of(job_id) or ""
        with self._lock:
            if self._closed:
                raise RuntimeError("the job runner was shut down")
            (self._api_slots if api_process else self._pool_slots).enqueue(job_id, site)
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand the executors every job the fairness rule lets start now."""
        started: list[Future[object]] = []
        with self._lock:
            for lane in (self._pool_slots, self._api_slots):
                while not self._closed:
                    queued = lane.pop_next(self._share)
                    if queued is None:
                        break
                    future = self._start(queued.job_id, api_process=lane is self._api_slots)
                    self._holding[future] = (lane, queued.site)
                    started.append(future)
            broken, self._broken = self._broken, []
        for executor in broken:
            executor.shutdown(wait=False, cancel_futures=True)
        for future in started:
            future.add_done_callback(self._done)

    def _start(self, job_id: str, *, api_process: bool) -> Future[object]:
        """Under the lock: give the job to its executor (a slot is free for it)."""
        if api_process:
            if self._api_executor is None:
                self._api_executor = ThreadPoolExecutor(
                    max_workers=self._api_workers, thread_name_prefix="privfit-api-job"
                )
            if self._thread_job is None:
                self._thread_job = self._api_worker()
            future = self._api_executor.submit(self._thread_job, job_id)
            self._pending[future] = (job_id, self._api_executor)
            return future
        if self._executor is None:
            self._executor = self._new_executor()
        if self.kind == "thread":
            if self._thread_job is None:
                self._thread_job = self._worker()
            future = self._executor.submit(self._thread_job, job_id)
        else:
            try:
                future = self._executor.submit(_run_in_worker, job_id)
            except BrokenProcessPool:  # a worker died and its callback has not run yet
                self._broken.append(self._executor)
                self._executor = self._new_executor()
                future = self._executor.submit(_run_in_worker, job_id)
        self._pending[future] = (job_id, self._executor)
        return future

    def notify_when_done(self, job_id: str, callback: JobListener) -> bool:
        """Call ``callback`` (from a pool thread) once this runner's execution of ``job_id``
        has ended, whatever its outcome, with what the job function returned (None when it
        raised or was dropped); False, and no call, when this runner is not running the job
        (already finished, or run elsewhere). For long polls."""
        with self._lock:
            waiting = (
                q.job_id for lane in (self._pool_slots, self._api_slots) for q in lane.waiting
            )
            if not any(job == job_id for job, _ in self._pending.values()) and job_id not in set(
                waiting
            ):
                return False
            self._listeners.setdefault(job_id, []).append(callback)
            return True

    @property
    def active(self) -> int:
        """Jobs submitted and not finished yet (waiting for a slot or running)."""
        with self._lock:
            return len(self._pending) + len(self._pool_slots.waiting) + len(self._api_slots.waiting)

    def waiting_sites(self) -> list[str]:
        """The owner sites of the jobs waiting for a slot, in arrival order (for tests)."""
        with self._lock:
            return [q.site for lane in (self._pool_slots, self._api_slots) for q in lane.waiting]

    def worker_pids(self) -> list[int]:
        """Process ids of the live worker processes (empty for threads); for ops and tests."""
        with self._lock:
            executor = self._executor
        if not isinstance(executor, ProcessPoolExecutor):
            return []
        processes = executor._processes or {}  # no public accessor
        return [pid for pid, proc in list(processes.items()) if proc.is_alive()]

    # -- internals --

    def _new_executor(self) -> Executor:
        if self.kind == "thread":
            return ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="privfit-job")
        executor = ProcessPoolExecutor(
            max_workers=self._workers,
            mp_context=multiprocessing.get_context(self._start_method),
            initializer=_init_worker,
            initargs=(self._worker,),
        )
        if self._warm:
            # With spawn, the pool starts a process per submission while none is idle: one
            # warm-up task per worker brings them all up now.
            for _ in range(self._workers):
                executor.submit(_warm_up)
        return executor

    def _done(self, future: Future[object]) -> None:
        with self._lock:
            entry = self._pending.pop(future, None)
            listeners = self._listeners.pop(entry[0], []) if entry is not None else []
            holding = self._holding.pop(future, None)
            if holding is not None:
                holding[0].release(holding[1])
        exc = None if future.cancelled() else future.exception()
        broken = isinstance(exc, BrokenProcessPool)
        if broken and entry is not None:
            self._replace_broken_pool(entry[1])
        if holding is not None:
            self._dispatch()  # a slot is free: start the next job the rule allows
        returned = None
        if listeners and not future.cancelled() and exc is None:
            returned = future.result()
        for listener in listeners:
            _tell(listener, returned)
        if entry is None or future.cancelled():
            return  # dropped at shutdown: still queued in the database
        job_id, _executor = entry
        if exc is None:
            return
        if broken:
            logger.error("job %s lost: its worker process died", job_id)
        else:
            logger.error("job %s: worker raised", job_id, exc_info=exc)
        try:
            resubmit = self._on_lost(job_id)
        except Exception:
            logger.exception("could not settle lost job %s", job_id)
            return
        if resubmit and broken:
            with self._lock:
                count = self._resubmits[job_id] = self._resubmits.get(job_id, 0) + 1
            if count > MAX_RESUBMITS:
                # The pool keeps dying before this job even starts: leave it queued (the next
                # start's recovery submits it again) instead of looping.
                logger.error("job %s stays queued: %d workers died before it ran", job_id, count)
                return
            try:
                self.submit(job_id)
            except RuntimeError:
                logger.warning("job %s stays queued: the runner is shut down", job_id)

    def _replace_broken_pool(self, broken: Executor) -> None:
        """Swap in a fresh pool once, whichever of the broken pool's futures reports first."""
        with self._lock:
            if self._closed or self._executor is not broken:
                return  # shut down, or already replaced by an earlier callback
            self._executor = self._new_executor()
        broken.shutdown(wait=False, cancel_futures=True)


def _tell(listener: JobListener, returned: object) -> None:
    try:
        listener(returned)
    except Exception:  # a waiting request that went away must not break the pool
        logger.exception("a job listener failed")
