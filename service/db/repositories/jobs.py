"""JobRepository: jobs; every status change is one conditional UPDATE on the expected
current status."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select, update

from service.db.models import (
    Job,
)
from service.db.repositories.base import Repository, rowcount

# Statements on the path of every fit job, built once (their compiled form is cached by
# SQLAlchemy anyway; building the statement objects is what these save).

#: queued → running (:meth:`JobRepository.claim`).
_CLAIM = (
    update(Job)
    .where(Job.id == bindparam("job_id"), Job.status == "queued")
    .values(status="running", started_at=bindparam("started_at"), attempt=Job.attempt + 1)
    .returning(Job)
    .execution_options(synchronize_session=False, populate_existing=True)
)
#: running → succeeded unless a cancel was requested (:meth:`JobRepository.succeed`).
_SUCCEED = (
    update(Job)
    .where(Job.id == bindparam("job_id"), Job.status == "running", Job.cancel_requested.is_(False))
    .values(
        status="succeeded",
        progress=1.0,
        model_id=bindparam("model_id"),
        finished_at=bindparam("finished_at"),
    )
    .returning(Job)
    .execution_options(synchronize_session=False, populate_existing=True)
)


class JobRepository(Repository[Job]):
    """Jobs. Every status change is one conditional UPDATE on the expected current status."""

    model = Job

    def get(self, id_: Any, *, fresh: bool = False) -> Job | None:
        """A job; ``fresh`` re-reads it after a conditional UPDATE changed it."""
        return self.get_fresh(id_) if fresh else super().get(id_)

    def get_by_idempotency_key(self, *, owner_site_id: str, idempotency_key: str) -> Job | None:
        """The site's job created with this idempotency key, if any."""
        query = select(Job).where(
            Job.owner_site_id == owner_site_id, Job.idempotency_key == idempotency_key
        )
        return self.session.scalars(query).one_or_none()

    def ids_with_status(self, status: str) -> Sequence[str]:
        """Ids of every job in ``status``, oldest first."""
        query = select(Job.id).where(Job.status == status).order_by(Job.created_at, Job.id)
        return self.session.scalars(query).all()

    def list_page(self, *, owner_site_id: str | None, limit: int, offset: int) -> Sequence[Job]:
        """Jobs newest first, of one site (or all)."""
        query = select(Job)
        if owner_site_id is not None:
            query = query.where(Job.owner_site_id == owner_site_id)
        query = query.order_by(Job.created_at.desc(), Job.id).limit(limit).offset(offset)
        return self.session.scalars(query).all()

    def count(self, *, owner_site_id: str | None) -> int:
        """How many jobs :meth:`list_page` pages through."""
        query = select(func.count()).select_from(Job)
        if owner_site_id is not None:
            query = query.where(Job.owner_site_id == owner_site_id)
        return int(self.session.scalar(query) or 0)

    def _update(self, job_id: str, *conditions: Any, **values: Any) -> bool:
        result = self.session.execute(
            update(Job)
            .where(Job.id == job_id, *conditions)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        return rowcount(result) == 1

    def transition(
        self,
        job_id: str,
        *,
        expected: str,
        status: str,
        finished_at: datetime | None = None,
        error: dict[str, Any] | None = None,
    ) -> bool:
        """``expected`` → ``status``; False when the job was not in ``expected``."""
        values: dict[str, Any] = {"status": status}
        if finished_at is not None:
            values["finished_at"] = finished_at
        if error is not None:
            values["error"] = error
        return self._update(job_id, Job.status == expected, **values)

    def claim(self, job_id: str, *, started_at: datetime) -> Job | None:
        """``queued`` → ``running`` for exactly one worker, counting the attempt; the claimed
        job as it now is (one ``UPDATE … RETURNING``), or None when it was not queued."""
        values = {"job_id": job_id, "started_at": started_at}
        return self.session.scalars(_CLAIM, values).one_or_none()

    def request_cancel(self, job_id: str) -> bool:
        """Flag a running job for cancellation; False when it is not running."""
        return self._update(job_id, Job.status == "running", cancel_requested=True)

    def report_progress(self, job_id: str, fraction: float | None) -> bool:
        """Record progress of a running job (None: only read); True when a cancel was
        requested (or the job is no longer running) and the worker should stop."""
        if fraction is not None:
            self._update(job_id, Job.status == "running", progress=fraction)
        row = self.session.execute(
            select(Job.status, Job.cancel_requested).where(Job.id == job_id)
        ).one_or_none()
        return row is None or row[0] != "running" or bool(row[1])

    def succeed(self, job_id: str, *, model_id: str | None, finished_at: datetime) -> Job | None:
        """``running`` → ``succeeded`` unless a cancel was requested meanwhile; the job as it
        now is (one ``UPDATE … RETURNING``), or None when it was not changed."""
        values = {"job_id": job_id, "model_id": model_id, "finished_at": finished_at}
        return self.session.scalars(_SUCCEED, values).one_or_none()
