"""The ``queue`` job runner: jobs on procrastinate (PostgreSQL), run by ``privfit worker``.

``PRIVFIT_JOB_RUNNER=queue`` (PostgreSQL only). Any number of API replicas and workers share
the one database that already holds the ledger; no other stateful service is added.

API side, :class:`QueueJobRunner`:

* **enqueue** — :meth:`~QueueJobRunner.enqueue_in_transaction` inserts the queue row on the
  connection of the transaction that stages the job and commits its charge
  (:func:`service.domain.jobs.charged.submit_charged_job`): both commit or neither does, so a
  job is never charged without being queued, nor queued without its charge. ``submit`` has
  nothing left to do.
* **long polls** — :meth:`~QueueJobRunner.subscribe_finished` wakes a waiting request when the
  job's final state is committed by any process (``LISTEN privfit_job_finished``).
* **recovery** — never the embedded runner's "fail everything running" (another process is
  running it): only :func:`settle_stalled_jobs`, on start and every heartbeat interval.

Worker side, :func:`run_workers` (``privfit worker``): ``--concurrency`` processes (one per
core by default), each a procrastinate worker running one job at a time with one BLAS thread,
so N processes use N cores instead of fighting over them.

Fair use between sites (issue 26 §4): the API gives each queue row a start tag (its
priority) and every worker claims through :class:`service.db.queue.FairJobManager`, which
applies :mod:`service.runtime.fairness` under an advisory lock: round-robin between the owner
sites of the queued jobs, and no site holds more than ⌊``PRIVFIT_MAX_SITE_WORKER_SHARE`` ×
live workers⌋ (at least one) running jobs. :class:`SharePolicy` is that rule.

Exactly-once noise: the task is never retried by procrastinate (``retry=False``), and the
domain's claim (``queued → running``, one conditional UPDATE) lets one execution start a job.
A worker that dies stops sending heartbeats; :func:`settle_stalled_jobs`, run by every API
replica and every worker supervisor (whichever notices first; every step is conditional),
fails its running job ``job-interrupted`` with the budget kept spent, and puts a task whose
job never started back in the queue for another worker. Jobs still queued are untouched and
simply run elsewhere.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final

from service.db.queue import (
    QUEUE_NAME,
    JobFinishedListener,
    QueueStore,
    SiteHead,
    defer_in_transaction,
    queue_app,
)
from service.db.session import make_engine, make_sessionmaker
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.jobs.lifecycle import settle_stalled_job
from service.runtime.fairness import Waiting, choose_next, start_tag
from service.settings import Settings, get_settings

__all__ = [
    "BLAS_THREAD_VARIABLES",
    "QueueJobRunner",
    "SharePolicy",
    "run_workers",
    "settle_stalled_jobs",
]

logger = logging.getLogger(__name__)

#: Environment variables that cap the BLAS/OpenMP thread pools of numpy and scipy.
BLAS_THREAD_VARIABLES: Final[tuple[str, ...]] = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


class SharePolicy:
    """:mod:`service.runtime.fairness` for the queue: start tags at enqueue, the choice among
    each site's first queued task at a claim (a :class:`service.db.queue.FairPolicy`)."""

    def __init__(self, share: float) -> None:
        self.share = share

    def start_tag(self, virtual_time: int, previous: int | None) -> int:
        return start_tag(virtual_time, previous)

    def choose(self, sites: Sequence[SiteHead], slots: int) -> int | None:
        heads = sorted(
            (s for s in sites if s.head_id is not None and s.head_tag is not None),
            key=lambda s: s.head_id or 0,
        )
        index = choose_next(
            [Waiting(s.site, s.head_tag or 0) for s in heads],
            {s.site: s.running for s in sites},
            slots=slots,
            share=self.share,
        )
        return None if index is None else heads[index].head_id


def settle_stalled_jobs(
    store: QueueStore, uow_factory: UnitOfWorkFactory, *, stalled_seconds: float
) -> int:
    """Settle the tasks of workers silent for more than ``stalled_seconds``; returns how many.

    A task whose job had started (``running``): the job fails ``job-interrupted``, its budget
    kept spent (it may have drawn noise), and the task is marked failed, never retried. A task
    whose job is still ``queued`` (the worker died before claiming it): back to the queue. A
    task whose job had already ended: the task is closed with the job's outcome.
    Safe to run in many processes at once: each step is a conditional update.
    """
    settled = 0
    for task in store.stalled_tasks(seconds_since_heartbeat=stalled_seconds):
        outcome = "missing" if task.job_id is None else settle_stalled_job(uow_factory, task.job_id)
        if outcome == "queued":
            # Fetched but never claimed: no noise was drawn; another worker may run it.
            done = store.retry(task.task_id)
            if done:
                logger.warning("job %s: its worker went silent before starting it", task.job_id)
        elif outcome == "succeeded":
            done = store.finish(task.task_id, succeeded=True)
        else:
            done = store.finish(task.task_id, succeeded=False)
            if outcome == "interrupted":
                logger.error(
                    "job %s: its worker went silent while running it; failed "
                    "(job-interrupted), budget kept spent",
                    task.job_id,
                )
        settled += done
    return settled


class _Sweeper:
    """A daemon thread running :func:`settle_stalled_jobs` every ``interval`` seconds."""

    def __init__(self, sweep: Callable[[], int], interval: float) -> None:
        self._sweep = sweep
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="privfit-stalled", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def run_once(self) -> int:
        try:
            return self._sweep()
        except Exception:
            logger.exception("could not settle stalled jobs")
            return 0

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.run_once()


class QueueJobRunner:
    """The API side of the queue: enqueue in the charge's transaction, wake long polls on any
    replica, settle stalled jobs. Executes nothing itself."""

    def __init__(self, settings: Settings, uow_factory: UnitOfWorkFactory) -> None:
        if settings.is_sqlite:
            raise ValueError("PRIVFIT_JOB_RUNNER=queue needs PostgreSQL")
        self._settings = settings
        self._uow_factory = uow_factory
        #: The cap on one job's estimated work (row-feature passes) the domain enforces.
        self.max_job_work = settings.max_job_work
        _quiet_engine_logs(settings)
        self._app = queue_app(settings.database_url)
        self._policy = SharePolicy(settings.max_site_worker_share)
        self._engine = make_engine(settings.database_url, pool_size=1)
        self.store = QueueStore(self._engine)
        self._listener = JobFinishedListener(settings.database_url)
        self._sweeper = _Sweeper(
            partial(
                settle_stalled_jobs,
                self.store,
                uow_factory,
                stalled_seconds=settings.queue_stalled_seconds,
            ),
            settings.queue_heartbeat_seconds,
        )
        self._started = False

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._listener.start()
        self._sweeper.start()

    def enqueue_in_transaction(self, uow: UnitOfWork, job_id: str) -> None:
        """Queue the job inside ``uow``'s open transaction (before its commit)."""
        defer_in_transaction(self._app, uow, job_id, policy=self._policy)

    def submit(self, job_id: str) -> None:
        """Nothing to do: the job was queued in the transaction that charged it."""

    def recover(self) -> Sequence[str]:
        """Settle stalled jobs; resubmits nothing (workers take queued jobs from the queue)."""
        self._sweeper.run_once()
        return []

    def shutdown(self, *, wait: bool = True) -> None:
        """Stop listening and settling; jobs run in the workers, so there is nothing to wait
        for (``wait`` is part of the runner protocol)."""
        del wait
        self._sweeper.stop()
        self._listener.stop()
        self._engine.dispose()

    def subscribe_finished(
        self, job_id: str, callback: Callable[[], None]
    ) -> Callable[[], None] | None:
        """Call ``callback`` once the job's final state is committed by any process (or when
        the notification connection was lost: the waiter re-reads); returns the function that
        unsubscribes, or None while not listening (the waiter falls back to reading)."""
        if not self._listener.listening:
            return None
        return self._listener.subscribe(job_id, lambda _job: callback())

    def workers_seen(self) -> int:
        """Workers that sent a heartbeat within the stalled timeout (0 when that cannot be
        read)."""
        try:
            return self.store.workers_seen(within_seconds=self._settings.queue_stalled_seconds)
        except Exception:
            logger.warning("could not read the workers' heartbeats", exc_info=True)
            return 0


# --- worker side ---------------------------------------------------------------------------


def _quiet_engine_logs(settings: Settings) -> None:
    """procrastinate logs two INFO lines per job; PrivFit logs its own outcomes. Its warnings
    and errors stay; ``PRIVFIT_LOG_LEVEL=DEBUG`` shows everything."""
    if settings.log_level != "DEBUG":
        logging.getLogger("procrastinate").setLevel(logging.WARNING)


def _limit_blas_threads() -> None:
    """One BLAS/OpenMP thread per job, for libraries loaded before or after this call."""
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)


def _exit_with_parent() -> None:
    """Linux: a worker process gets SIGTERM (and finishes its job) when its supervisor dies."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def serve_worker(settings: Settings, *, name: str, sweep: bool) -> None:
    """Run one procrastinate worker (one job at a time) in this process until SIGTERM/SIGINT,
    which lets the running job finish."""
    from service.runtime.worker import WorkerConfig, job_function

    _limit_blas_threads()
    _quiet_engine_logs(settings)
    job = job_function(WorkerConfig.from_settings(settings))
    app = queue_app(
        settings.database_url,
        run_job=job,
        policy=SharePolicy(settings.max_site_worker_share),
        live_worker_seconds=settings.queue_stalled_seconds,
    )
    sweeper = None
    if sweep:
        engine = make_engine(settings.database_url, pool_size=1)
        uow_factory = partial(UnitOfWork, make_sessionmaker(engine))
        sweeper = _Sweeper(
            partial(
                settle_stalled_jobs,
                QueueStore(engine),
                uow_factory,
                stalled_seconds=settings.queue_stalled_seconds,
            ),
            settings.queue_heartbeat_seconds,
        )
        sweeper.run_once()
        sweeper.start()
    try:
        app.run_worker(
            queues=[QUEUE_NAME],
            concurrency=1,
            name=name,
            wait=True,
            update_heartbeat_interval=settings.queue_heartbeat_seconds,
            stalled_worker_timeout=settings.queue_stalled_seconds,
            delete_jobs="successful",
            install_signal_handlers=True,
        )
    finally:
        if sweeper is not None:
            sweeper.stop()


def _child(name: str) -> None:
    """Entry point of a spawned worker process (settings from the inherited environment)."""
    _exit_with_parent()
    from service.logs import configure_logging

    settings = get_settings()
    configure_logging(settings.log_level)
    serve_worker(settings, name=name, sweep=False)


def run_workers(settings: Settings, *, concurrency: int | None = None) -> int:
    """``privfit worker``: ``concurrency`` worker processes (default: one per core).

    With one, the worker runs in this process. With more, this process supervises them:
    it settles stalled jobs, starts a new process for one that died, and on SIGTERM/SIGINT
    stops them all, each finishing its running job first.
    """
    count = concurrency or os.cpu_count() or 1
    for variable in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(variable, "1")  # inherited by every worker process
    if count == 1:
        serve_worker(settings, name=f"privfit-worker-{os.getpid()}", sweep=True)
        return 0
    return _supervise(settings, count)


def _supervise(settings: Settings, count: int) -> int:
    context = multiprocessing.get_context("spawn")
    stopping = threading.Event()

    def start(index: int) -> Any:
        process = context.Process(
            target=_child, args=(f"privfit-worker-{os.getpid()}-{index}",), daemon=False
        )
        process.start()
        return process

    def stop(_signum: int, _frame: object) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    engine = make_engine(settings.database_url, pool_size=1)
    sweeper = _Sweeper(
        partial(
            settle_stalled_jobs,
            QueueStore(engine),
            partial(UnitOfWork, make_sessionmaker(engine)),
            stalled_seconds=settings.queue_stalled_seconds,
        ),
        settings.queue_heartbeat_seconds,
    )
    processes = [start(index) for index in range(count)]
    sweeper.run_once()
    sweeper.start()
    try:
        while not stopping.wait(0.5):
            for index, process in enumerate(processes):
                if not process.is_alive():
                    logger.error(
                        "worker process %s exited (%s); starting another",
                        process.pid,
                        process.exitcode,
                    )
                    time.sleep(1.0)
                    processes[index] = start(index)
    finally:
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        for process in processes:
            process.join()
        sweeper.stop()
        engine.dispose()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
