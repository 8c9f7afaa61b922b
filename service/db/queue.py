"""The distributed job queue's storage: procrastinate on PrivFit's own PostgreSQL database.

Everything that touches the queue's tables or PostgreSQL's LISTEN/NOTIFY lives here (all SQL
stays in ``service.db``); :mod:`service.jobs.queue` builds the runner and the worker on it.

* :func:`queue_app` — the procrastinate app with PrivFit's one task, ``privfit.run_job(job_id)``
  (no retries: a job that may draw noise runs at most once).
* :func:`defer_in_transaction` — enqueue a job on the connection of an open unit of work, so
  the queue row commits (or rolls back) with the job row and its charge: a charged job is
  always queued and a queued task always has its charged job.
* :class:`QueueStore` — the stalled tasks of dead workers (heartbeats), retrying or failing
  their queue rows, and the workers seen recently (``/readyz``).
* :class:`JobFinishedListener` — one ``LISTEN privfit_job_finished`` connection per API
  process; the migration's trigger notifies a job's id when it reaches a final state.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import procrastinate
import psycopg
from procrastinate import sql as procrastinate_sql
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from service.db.uow import UnitOfWork

__all__ = [
    "FINISHED_CHANNEL",
    "QUEUE_NAME",
    "TASK_NAME",
    "JobFinishedListener",
    "QueueStore",
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


def conninfo(database_url: str) -> str:
    """A libpq connection string for a ``postgresql+psycopg://`` SQLAlchemy URL (query options
    such as ``options=-csearch_path=…`` kept); ValueError for any other database."""
    url = make_url(database_url)
    if url.get_backend_name() != "postgresql":
        raise ValueError("the job queue needs PostgreSQL")
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def queue_app(
    database_url: str, *, run_job: Callable[[str], object] | None = None
) -> procrastinate.App:
    """The procrastinate app on ``database_url``. ``run_job`` (workers only) is the task's body;
    the API defers by task name and never needs it. Not opened: a worker opens it with
    ``run_worker``, the API defers on its own connection (:func:`defer_in_transaction`)."""
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=conninfo(database_url), min_size=1, max_size=2
        )
    )
    if run_job is not None:
        body = run_job

        def run_privfit_job(job_id: str) -> None:
            body(job_id)

        app.task(name=TASK_NAME, queue=QUEUE_NAME, retry=False)(run_privfit_job)
    return app


def defer_in_transaction(app: procrastinate.App, uow: UnitOfWork, job_id: str) -> int:
    """Enqueue ``privfit.run_job(job_id)`` inside ``uow``'s open transaction (it commits or
    rolls back with everything else the unit of work wrote); returns the queue row's id."""
    connection = uow.session.connection().connection.driver_connection
    job = app.configure_task(TASK_NAME, queue=QUEUE_NAME, connection=connection).defer(
        job_id=job_id
    )
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
