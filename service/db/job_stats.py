"""Aggregate job and ledger figures for ``/metrics``, read from the database so that every API
replica reports the same deployment-wide numbers, whichever process ran the jobs.

Nothing here is per dataset or per site: the figures are counts by job kind, mechanism and
status, durations, and the ε charged summed over every dataset (docs/design.md §2: no figure about
another site's dataset leaves the service).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from service.db.models import Job, LedgerCharge

__all__ = ["DurationBuckets", "JobStatistics", "job_statistics"]

FINAL_STATUSES = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class DurationBuckets:
    """Run times (started → finished) of the finished jobs of one kind and mechanism:
    ``cumulative[i]`` jobs took at most ``bounds[i]`` seconds; ``count`` and ``total`` over all."""

    kind: str
    mechanism: str
    cumulative: tuple[int, ...]
    count: int
    total: float


@dataclass(frozen=True, slots=True)
class JobStatistics:
    queued: dict[str, int]
    running: dict[str, int]
    finished: dict[tuple[str, str], int]
    durations: list[DurationBuckets]
    epsilon_charged_units: int
    epsilon_refunded_units: int


def _mechanism() -> Any:
    """The job's mechanism, aggregation method or federated protocol (its params' name)."""
    return func.coalesce(
        Job.params["mechanism"].as_string(),
        Job.params["method"].as_string(),
        Job.params["protocol"].as_string(),
        "",
    )


def _seconds(session: Session) -> Any:
    if session.get_bind().dialect.name == "sqlite":
        return (func.julianday(Job.finished_at) - func.julianday(Job.started_at)) * 86400.0
    return func.extract("epoch", Job.finished_at - Job.started_at)


def job_statistics(session: Session, bounds: Sequence[float]) -> JobStatistics:
    """Every figure of :class:`JobStatistics` in four grouped queries."""
    by_status: dict[str, dict[str, int]] = {"queued": {}, "running": {}}
    finished: dict[tuple[str, str], int] = {}
    for kind, status, count in session.execute(
        select(Job.kind, Job.status, func.count()).group_by(Job.kind, Job.status)
    ):
        if status in by_status:
            by_status[status][kind] = int(count)
        elif status in FINAL_STATUSES:
            finished[(kind, status)] = int(count)

    seconds = _seconds(session)
    mechanism = _mechanism()
    columns = [func.sum(case((seconds <= bound, 1), else_=0)) for bound in bounds]
    rows = session.execute(
        select(Job.kind, mechanism, func.count(), func.coalesce(func.sum(seconds), 0.0), *columns)
        .where(Job.status.in_(FINAL_STATUSES), Job.started_at.is_not(None))
        .where(Job.finished_at.is_not(None))
        .group_by(Job.kind, mechanism)
    ).all()
    durations = [
        DurationBuckets(
            kind=row[0],
            mechanism=row[1] or "",
            cumulative=tuple(int(v or 0) for v in row[4:]),
            count=int(row[2]),
            total=float(row[3] or 0.0),
        )
        for row in rows
    ]
    refunded_units = case((LedgerCharge.state == "refunded", LedgerCharge.epsilon_units), else_=0)
    charged, refunded = session.execute(
        select(
            func.coalesce(func.sum(LedgerCharge.epsilon_units), 0),
            func.coalesce(func.sum(refunded_units), 0),
        )
    ).one()
    return JobStatistics(
        queued=by_status["queued"],
        running=by_status["running"],
        finished=finished,
        durations=durations,
        epsilon_charged_units=int(charged),
        epsilon_refunded_units=int(refunded),
    )
