"""Jobs (``GET /v1/jobs/{id}``, ``POST /v1/jobs/{id}/cancel``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from service.api.schemas.base import ResponseModel
from service.api.schemas.problem import PROBLEM_TYPE_BASE
from service.domain.jobs.lifecycle import JobView

__all__ = ["JobCharge", "JobList", "JobProblem", "JobRead"]

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class JobProblem(ResponseModel):
    """Why a job failed (RFC 9457 members). Never contains data values or internals."""

    type: str = Field(examples=[PROBLEM_TYPE_BASE + "job-interrupted"])
    title: str
    detail: str


class JobCharge(ResponseModel):
    """What the job charged to its dataset's budget."""

    dataset_id: str
    epsilon: float
    delta: float
    state: Literal["charged", "refunded"] = Field(
        description="`refunded` only for a job cancelled while still queued."
    )


class JobRead(ResponseModel):
    """A job: a fit, aggregation or federated fit running in the background. Poll it until
    `status` is final."""

    id: str
    kind: str = Field(
        description="`fit` (one dataset), `aggregate` (a study's aggregation) or `federated` "
        "(a study's multiparty fit across granted datasets)."
    )
    status: JobStatus
    progress: float = Field(ge=0, le=1, description="Fraction done, updated while running.")
    dataset_id: str | None
    params: dict[str, Any] = Field(description="The validated request.")
    model_id: str | None = Field(description="The released model, once `succeeded`.")
    error: JobProblem | None = Field(description="Why the job failed, once `failed`.")
    cancel_requested: bool = Field(
        description="A cancel was requested while the job was running; it stops at its next "
        "progress report and ends `cancelled` (its budget stays spent)."
    )
    charges: list[JobCharge]
    attempt: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    warnings: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Warnings fixed at submission (also in `params` and the model's record), "
        "e.g. `below_majority_baseline`: the fit's expected accuracy is below always answering "
        "the majority class, or `worse_than_mean_baseline` (numeric label): its expected RMSE "
        "is above always predicting the public reference's mean. (An auto fit whose "
        "baseline is estimated privately gets its warning in the model's record, once the "
        "count is released.)",
    )

    @classmethod
    def from_view(cls, view: JobView) -> JobRead:
        job = view.job
        error = None
        if job.error is not None:
            error = JobProblem(
                type=PROBLEM_TYPE_BASE + str(job.error.get("type", "job-failed")),
                title=str(job.error.get("title", "Job failed")),
                detail=str(job.error.get("detail", "")),
            )
        return cls(
            id=job.id,
            kind=job.kind,
            status=job.status,  # type: ignore[arg-type]
            progress=float(job.progress),
            dataset_id=job.dataset_id,
            params=dict(job.params),
            model_id=job.model_id,
            error=error,
            cancel_requested=bool(job.cancel_requested),
            charges=[
                JobCharge(
                    dataset_id=c.dataset_id,
                    epsilon=c.epsilon,
                    delta=c.delta,
                    state=c.state,  # type: ignore[arg-type]
                )
                for c in view.charges
            ],
            attempt=job.attempt,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            warnings=[dict(w) for w in (job.params or {}).get("warnings") or []],
        )


class JobList(ResponseModel):
    """One page of jobs, newest first."""

    items: list[JobRead]
    total: int
    limit: int
    offset: int
