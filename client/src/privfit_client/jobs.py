"""A job handle: the last known state of a PrivFit job and a way to wait for its end.

Waiting uses the API's long poll (``GET /v1/jobs/{id}?wait=s``): the server answers as soon
as the job ends, so there is no polling interval to tune and no sleep in the client.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Final, Protocol

from privfit_client.errors import JobFailed
from privfit_client.models import JobProblem, JobRead, ModelRead


class JobsApi(Protocol):
    """What a :class:`Job` asks of the client that made it (``privfit_client.Client``)."""

    def job(self, job_id: str, *, wait: float = 0.0) -> Job: ...

    def cancel_job(self, job_id: str) -> Job: ...

    def model(self, model_id: str) -> ModelRead: ...


__all__ = ["FINISHED", "MAX_WAIT", "Job", "ProgressCallback"]

#: Statuses a job does not leave.
FINISHED: Final[frozenset[str]] = frozenset({"succeeded", "failed", "cancelled"})
#: The longest long poll the API grants (seconds).
MAX_WAIT: Final[float] = 30.0
#: Long-poll length while a progress bar is shown, so it moves between answers.
_PROGRESS_POLL: Final[float] = 1.0

ProgressCallback = Callable[[JobRead], None]


class Job:
    """A job of a fit, an aggregation or a federated fit. ``state`` is its last known state."""

    def __init__(self, client: JobsApi, state: JobRead) -> None:
        self._client = client
        self.state = state

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.kind} {self.status} {self.progress:.0%}>"

    @property
    def id(self) -> str:
        """The job's id."""
        return self.state.id

    @property
    def kind(self) -> str:
        """``fit``, ``aggregate``, ``federated``, ..."""
        return self.state.kind

    @property
    def status(self) -> str:
        """``queued``, ``running``, ``succeeded``, ``failed`` or ``cancelled``."""
        return self.state.status

    @property
    def progress(self) -> float:
        """Fraction done, from 0 to 1."""
        return self.state.progress

    @property
    def model_id(self) -> str | None:
        """The resulting model, once the job has succeeded."""
        return self.state.model_id

    @property
    def error(self) -> JobProblem | None:
        """Why the job failed, if it did."""
        return self.state.error

    @property
    def warnings(self) -> list[dict[str, Any]]:
        """Warnings fixed at submission, e.g. ``below_majority_baseline`` (the fit's expected
        accuracy is below always answering the majority class)."""
        return list(self.state.warnings or [])

    @property
    def done(self) -> bool:
        """Whether the job has ended (succeeded, failed or cancelled)."""
        return self.state.status in FINISHED

    def refresh(self, wait: float = 0.0) -> Job:
        """Re-read the job; with ``wait`` > 0, a long poll that answers when it ends."""
        self.state = self._client.job(self.id, wait=wait).state
        return self

    def cancel(self) -> Job:
        """Ask the server to cancel the job (a queued job's charge is refunded)."""
        self.state = self._client.cancel_job(self.id).state
        return self

    def wait(
        self,
        timeout: float | None = None,
        *,
        progress: bool | ProgressCallback = False,
        raise_on_failure: bool = True,
    ) -> Job:
        """Block until the job ends and return it.

        ``progress=True`` draws a progress bar on stderr; a callable instead receives every
        state read. Raises :class:`~privfit_client.errors.JobFailed` if the job failed or was
        cancelled (unless ``raise_on_failure=False``) and :class:`TimeoutError` if it is still
        running after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        callback, bar = _progress_reporter(self, progress)
        poll = _PROGRESS_POLL if progress else MAX_WAIT
        with bar:
            callback(self.state)
            while not self.done:
                wait = poll
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"job {self.id} still {self.status} after {timeout}s")
                    wait = min(wait, left)
                self.refresh(wait=wait)
                callback(self.state)
        if raise_on_failure and self.status != "succeeded":
            raise JobFailed(self.state)
        return self

    def model(self) -> ModelRead:
        """The model the job produced (waits for the job first)."""
        if not self.done:
            self.wait()
        if self.model_id is None:
            raise JobFailed(self.state)
        return self._client.model(self.model_id)


def _progress_reporter(
    job: Job, progress: bool | ProgressCallback
) -> tuple[ProgressCallback, AbstractContextManager[object]]:
    """A callback for each state read and the context that shows it (a rich bar or nothing)."""
    if callable(progress):
        return progress, nullcontext()
    if not progress:
        return (lambda _state: None), nullcontext()
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    task = bar.add_task(f"{job.kind} {job.id}", total=1.0)

    def update(state: JobRead) -> None:
        bar.update(
            task,
            completed=1.0 if state.status == "succeeded" else state.progress,
            description=f"{state.kind} {state.id} {state.status}",
        )

    return update, bar
