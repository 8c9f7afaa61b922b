"""The problems stored on failed jobs: fixed, data-free texts (a failure may itself reveal
something, so none carries a data value or an internal message)."""

from __future__ import annotations

from typing import Any, Final

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
    "plan-mismatch": (
        "Plan changed since submission",
        "the calibration fixed and charged when the job was submitted is not the one the "
        "service derives for it now, so the job was not run and no model was released; the "
        "budget stays spent. Quote the job id when reporting it",
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
