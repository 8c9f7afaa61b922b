"""The distributed job queue's storage: procrastinate on PrivFit's own PostgreSQL database.

Everything that touches the queue's tables or PostgreSQL's LISTEN/NOTIFY lives here (all SQL
stays in ``service.db``); :mod:`service.runtime.queue_runner` builds the runner and the worker
on it.

* :func:`queue_app` — the procrastinate app with PrivFit's one task, ``privfit.run_job(job_id)``
  (no retries: a job that may draw noise runs at most once).
* :func:`defer_in_transaction` — enqueue a job on the connection of an open unit of work, so
  the queue row commits (or rolls back) with the job row and its charge: a charged job is
  always queued and a queued task always has its charged job.
* :class:`QueueStore` — the stalled tasks of dead workers (heartbeats), retrying or failing
  their queue rows, and the workers seen recently (``/readyz``).
* :class:`JobFinishedListener` — one ``LISTEN privfit_job_finished`` connection per API
  process; the migration's trigger notifies a job's id when it reaches a final state.
* :class:`FairJobManager` — the workers' claim, fair between sites (issue 26 §4).

Fair claims. The design changes procrastinate's *claim* only, not its tables or functions (no
migration): each queue row's ``priority`` holds minus its start tag, computed at enqueue from
the rows still queued or running (:func:`defer_in_transaction` with a :class:`FairPolicy`);
a worker's ``fetch_job`` takes a transaction-level advisory lock (:data:`CLAIM_LOCK`), so
claims are serialised and each sees the jobs every earlier claim started, reads each owner
site's running count and its first queued row (highest priority, then oldest), counts the
live workers (the slots), lets the policy choose, and marks that one row ``doing`` exactly as
``procrastinate_fetch_job_v2`` would. The alternative of per-site queueing locks fixes each
job's lane when it is queued (a site's job can wait behind its own long job while its other
lane is idle) and cannot follow the number of live workers; a dispatcher would be a new
process to run and watch. A worker that finds nothing it may start sleeps until the next
``defer`` notification or procrastinate's polling interval; the worker that ends a job claims
again at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import procrastinate
import psycopg
from procrastinate import jobs as procrastinate_jobs
from procrastinate import manager as procrastinate_manager
from procrastinate import sql as procrastinate_sql
from psycopg.rows import dict_row
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from service.db.uow import UnitOfWork

__all__ = [
    "CLAIM_LOCK",
    "FINISHED_CHANNEL",
    "QUEUE_NAME",
    "TASK_NAME",
    "FairJobManager",
    "FairPolicy",
    "JobFinishedListener",
    "QueueStore",
    "SiteHead",
    "StalledTask",
    "conninfo",
    "defer_in_transaction",
    "queue_app",
]

logger = logging.getLogger(__name__)

#: The one task: run a PrivFit job (its row holds everything; the task carries only its id).
TASK_NAME: Final[str] = "privfit.run_job"
#: The procrastinate queue PrivFit's workers take jobs from.
QUEUE_NAME: Final[str] = "privfit"
#: The channel the ``job`` trigger notifies a job id on when the job reaches a final state.
FINISHED_CHANNEL: Final[str] = "privfit_job_finished"


#: The advisory lock (``pg_advisory_xact_lock``) that serialises the workers' claims.
CLAIM_LOCK: Final[int] = 0x7072_6976_6669_74  # "privfit"


@dataclass(frozen=True, slots=True)
class SiteHead:
    """One owner site in the queue: its running tasks and its first queued one (the row's
    id and start tag; None when it has nothing queued)."""

    site: str
    running: int
    head_id: int | None
    head_tag: int | None


class FairPolicy(Protocol):
    """The fairness rule the queue applies (:mod:`service.runtime.fairness`, given by the
    runner: ``service.db`` holds the SQL, not the policy)."""

    def start_tag(self, virtual_time: int, previous: int | None) -> int:
        """A new job's start tag from V and its site's latest tag still queued or running."""
        ...

    def choose(self, sites: Sequence[SiteHead], slots: int) -> int | None:
        """The queue row id to start now (one of the heads), or None."""
        ...


#: V (the largest tag running, else the smallest queued, else 0) and the latest tag of the
#: new job's site among the rows still queued or running, in the enqueuing transaction.
_TAG_STATE = text(
    """
    WITH active AS (
        SELECT q.status, q.priority, j.owner_site_id AS site
        FROM procrastinate_jobs AS q LEFT JOIN job AS j ON j.id = q.args ->> 'job_id'
        WHERE q.queue_name = :queue AND q.status IN ('todo', 'doing')
    )
    SELECT
        (SELECT -min(priority) FROM active WHERE status = 'doing') AS running_tag,
        (SELECT -max(priority) FROM active WHERE status = 'todo') AS queued_tag,
        (SELECT -min(a.priority) FROM active AS a JOIN job AS me ON me.id = :job_id
         WHERE a.site = me.owner_site_id) AS previous
    """
)

#: Each owner site's running count and first queued row (priority, then age), for a claim.
_SITE_HEADS = """
    WITH active AS (
        SELECT q.id, q.status, q.priority, coalesce(j.owner_site_id, '') AS site
        FROM procrastinate_jobs AS q LEFT JOIN job AS j ON j.id = q.args ->> 'job_id'
        WHERE q.status IN ('todo', 'doing')
          AND (%(queues)s::varchar[] IS NULL OR q.queue_name = ANY(%(queues)s::varchar[]))
          AND (q.status = 'doing' OR q.scheduled_at IS NULL OR q.scheduled_at <= now())
    ),
    running AS (
        SELECT site, count(*) AS running FROM active WHERE status = 'doing' GROUP BY site
    ),
    heads AS (
        SELECT DISTINCT ON (site) site, id, priority FROM active WHERE status = 'todo'
        ORDER BY site, priority DESC, id
    )
    SELECT coalesce(h.site, r.site) AS site, coalesce(r.running, 0) AS running,
           h.id AS head_id, h.priority AS head_priority
    FROM heads AS h FULL JOIN running AS r ON r.site = h.site
"""

_LIVE_WORKERS = """
    SELECT count(*) AS workers FROM procrastinate_workers
    WHERE last_heartbeat >= now() - make_interval(secs => %(secs)s)
"""

#: What ``procrastinate_fetch_job_v2`` does to the row it picks, for the row the policy chose.
_CLAIM = """
    UPDATE procrastinate_jobs SET status = 'doing', worker_id = %(worker_id)s
    WHERE id = %(id)s AND status = 'todo'
    RETURNING id, status, task_name, priority, lock, queueing_lock, args, scheduled_at,
              queue_name, attempts, worker_id
"""


class FairJobManager(procrastinate_manager.JobManager):
    """procrastinate's job manager with PrivFit's fair claim (module docstring); everything
    else (defer, finish, retry, heartbeats) is procrastinate's own."""

    def __init__(
        self,
        connector: procrastinate.PsycopgConnector,
        *,
        policy: FairPolicy,
        live_worker_seconds: float,
    ) -> None:
        super().__init__(connector)
        self._psycopg = connector
        self._policy = policy
        self._live_worker_seconds = live_worker_seconds

    async def fetch_job(
        self, queues: Iterable[str] | None, worker_id: int
    ) -> procrastinate_jobs.Job | None:
        names = None if queues is None else list(queues)
        async with self._psycopg.pool.connection() as connection, connection.transaction():
            cursor = connection.cursor(row_factory=dict_row)
            await cursor.execute("SELECT pg_advisory_xact_lock(%(key)s)", {"key": CLAIM_LOCK})
            await cursor.execute(_SITE_HEADS, {"queues": names})
            sites = [
                SiteHead(
                    site=str(row["site"]),
                    running=int(row["running"]),
                    head_id=None if row["head_id"] is None else int(row["head_id"]),
                    head_tag=None if row["head_priority"] is None else -int(row["head_priority"]),
                )
                for row in await cursor.fetchall()
            ]
            await cursor.execute(_LIVE_WORKERS, {"secs": self._live_worker_seconds})
            live = await cursor.fetchone()
            # The caller is a worker with a free slot, whatever the heartbeats say.
            busy = sum(site.running for site in sites)
            slots = max(int(live["workers"]) if live else 0, busy + 1)
            chosen = self._policy.choose(sites, slots)
            if chosen is None:
                return None
            await cursor.execute(_CLAIM, {"id": chosen, "worker_id": worker_id})
            row = await cursor.fetchone()
        return None if row is None else procrastinate_jobs.Job.from_row(row)


def conninfo(database_url: str) -> str:
    """A libpq connection string for a ``postgresql+psycopg://`` SQLAlchemy URL (query options
    such as ``options=-csearch_path=…`` kept); ValueError for any other database."""
    url = make_url(database_url)
    if url.get_backend_name() != "postgresql":
        raise ValueError("the job queue needs PostgreSQL")
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def queue_app(
    database_url: str,
    *,
    run_job: Callable[[str], object] | None = None,
    policy: FairPolicy | None = None,
    live_worker_seconds: float = 30.0,
) -> procrastinate.App:
    """The procrastinate app on ``database_url``. ``run_job`` (workers only) is the task's body;
    the API defers by task name and never needs it. Not opened: a worker opens it with
    ``run_worker``, the API defers on its own connection (:func:`defer_in_transaction`).
    With ``policy`` (workers), tasks are claimed by :class:`FairJobManager`, counting as
    slots the workers that sent a heartbeat within ``live_worker_seconds``."""
    connector = procrastinate.PsycopgConnector(
        conninfo=conninfo(database_url), min_size=1, max_size=2
    )
    app = procrastinate.App(connector=connector)
    if policy is not None:
        app.job_manager = FairJobManager(
            connector, policy=policy, live_worker_seconds=live_worker_seconds
        )
    if run_job is not None:
        body = run_job

        def run_privfit_job(job_id: str) -> None:
            body(job_id)

        app.task(name=TASK_NAME, queue=QUEUE_NAME, retry=False)(run_privfit_job)
    return app


def defer_in_transaction(
    app: procrastinate.App, uow: UnitOfWork, job_id: str, *, policy: FairPolicy | None = None
) -> int:
    """Enqueue ``privfit.run_job(job_id)`` inside ``uow``'s open transaction (it commits or
    rolls back with everything else the unit of work wrote); returns the queue row's id.
    With ``policy``, the row's priority is minus the job's start tag (the job row, already
    flushed in this transaction, names its site)."""
    priority = 0
    if policy is not None:
        state = uow.session.execute(_TAG_STATE, {"queue": QUEUE_NAME, "job_id": job_id}).one()
        running, queued, previous = (None if v is None else int(v) for v in state)
        virtual_time = running if running is not None else queued if queued is not None else 0
        priority = -policy.start_tag(virtual_time, previous)
    connection = uow.session.connection().connection.driver_connection
    job = app.configure_task(
        TASK_NAME, queue=QUEUE_NAME, connection=connection, priority=priority
    ).defer(job_id=job_id)
    return int(job)


@dataclass(frozen=True, slots=True)
class StalledTask:
    """A queue row in ``doing`` whose worker stopped sending heartbeats (or was pruned)."""

    task_id: int
    job_id: str | None


class QueueStore:
    """The queue's rows as PrivFit's recovery and operations read and settle them."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def stalled_tasks(self, *, seconds_since_heartbeat: float) -> list[StalledTask]:
        """PrivFit tasks being run (``doing``) by a worker whose last heartbeat is older than
        ``seconds_since_heartbeat``, or by a worker already pruned."""
        with self._engine.connect() as connection:
            rows = connection.exec_driver_sql(
                procrastinate_sql.queries["select_stalled_jobs_by_heartbeat"],
                {
                    "queue": QUEUE_NAME,
                    "task_name": TASK_NAME,
                    "seconds_since_heartbeat": seconds_since_heartbeat,
                },
            ).mappings()
            return [StalledTask(int(row["id"]), _job_id(row["args"])) for row in rows.fetchall()]

    def retry(self, task_id: int) -> bool:
        """Put a stalled task back to ``todo`` so another worker runs it (only for a job that
        never started); False when it is no longer ``doing`` (settled by someone else)."""
        return self._settle(
            procrastinate_sql.queries["retry_job"],
            {
                "job_id": task_id,
                "retry_at": datetime.now(UTC),
                "new_priority": None,
                "new_queue_name": None,
                "new_lock": None,
            },
        )

    def finish(self, task_id: int, *, succeeded: bool) -> bool:
        """Close a stalled task as ``succeeded`` or ``failed`` (never retried); False when it
        is no longer ``doing``."""
        return self._settle(
            procrastinate_sql.queries["finish_job"],
            {
                "job_id": task_id,
                "status": "succeeded" if succeeded else "failed",
                "delete_job": False,
            },
        )

    def _settle(self, query: str, arguments: Mapping[str, Any]) -> bool:
        try:
            with self._engine.begin() as connection:
                connection.exec_driver_sql(query, dict(arguments))
        except Exception as exc:  # procrastinate's functions raise when the row moved on
            logger.debug("queue row already settled: %s", exc)
            return False
        return True

    def workers_seen(self, *, within_seconds: float) -> int:
        """Workers whose last heartbeat is at most ``within_seconds`` old."""
        with self._engine.connect() as connection:
            seen = connection.execute(
                text(
                    "SELECT count(*) FROM procrastinate_workers "
                    "WHERE last_heartbeat >= NOW() - make_interval(secs => :secs)"
                ),
                {"secs": within_seconds},
            ).scalar_one()
        return int(seen)


def _job_id(args: object) -> str | None:
    if isinstance(args, Mapping):
        value = args.get("job_id")
        return value if isinstance(value, str) else None
    return None


#: Told that a job reached a final state (called from the listener's thread).
FinishedCallback = Callable[[str | None], None]


class JobFinishedListener:
    """One connection per process listening on :data:`FINISHED_CHANNEL`.

    :meth:`subscribe` registers a callback for a job id; it is called once with the id when
    the job's final state is committed, by whichever process committed it, or with None when
    the connection was lost (a notification may have been missed: the waiter must re-read).
    No polling: the thread blocks on the connection's socket.
    """

    def __init__(self, database_url: str, *, reconnect_seconds: float = 1.0) -> None:
        self._conninfo = conninfo(database_url)
        self._reconnect_seconds = reconnect_seconds
        self._lock = threading.Lock()
        self._waiters: dict[str, list[FinishedCallback]] = {}
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, *, wait: float = 5.0) -> None:
        """Start listening (idempotent); waits up to ``wait`` s for the LISTEN to be in place."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="privfit-job-listener", daemon=True
            )
            self._thread.start()
        self._listening.wait(wait)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._wake_all()

    @property
    def listening(self) -> bool:
        return self._listening.is_set()

    def subscribe(self, job_id: str, callback: FinishedCallback) -> Callable[[], None]:
        """Call ``callback`` when ``job_id`` finishes; returns the function that unsubscribes."""
        with self._lock:
            self._waiters.setdefault(job_id, []).append(callback)

        def unsubscribe() -> None:
            with self._lock:
                callbacks = self._waiters.get(job_id)
                if callbacks and callback in callbacks:
                    callbacks.remove(callback)
                    if not callbacks:
                        del self._waiters[job_id]

        return unsubscribe

    def _dispatch(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            with self._lock:
                callbacks = self._waiters.pop(job_id, [])
            for callback in callbacks:
                _call(callback, job_id)

    def _wake_all(self) -> None:
        with self._lock:
            everyone, self._waiters = self._waiters, {}
        for callbacks in everyone.values():
            for callback in callbacks:
                _call(callback, None)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.Connection.connect(self._conninfo, autocommit=True) as connection:
                    connection.execute(f"LISTEN {FINISHED_CHANNEL}")
                    self._listening.set()
                    self._listen(connection)
            except Exception as exc:
                logger.warning("job notifications lost (%s); reconnecting", exc)
            finally:
                self._listening.clear()
                # Whatever finished while we were not listening: let every waiter re-read.
                self._wake_all()
            self._stop.wait(self._reconnect_seconds)

    def _listen(self, connection: psycopg.Connection[Any]) -> None:
        while not self._stop.is_set():
            # Blocks on the socket for up to a second (then checks for a stop request).
            for notice in connection.notifies(timeout=1.0):
                self._dispatch([notice.payload])


def _call(callback: FinishedCallback, job_id: str | None) -> None:
    try:
        callback(job_id)
    except Exception:  # a waiter that went away must not stop the listener
        logger.exception("a job-finished callback failed")
