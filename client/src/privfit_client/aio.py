"""``AsyncClient``: the client for asyncio programs.

Each call runs :class:`~privfit_client.Client`'s in a worker thread (``asyncio.to_thread``),
so the event loop never blocks, while retries, idempotency keys, long polls and typed errors
stay exactly those of the synchronous client::

    async with AsyncClient(url, key) as pf:
        jobs = [await pf.fit(d, epsilon=0.5, regularization=1e-3) for d in dataset_ids]
        await asyncio.gather(*(job.wait() for job in jobs))
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, ParamSpec, Self, TypeVar

from privfit_client._io import DataSource, SpecSource
from privfit_client.client import Client
from privfit_client.jobs import Job, ProgressCallback
from privfit_client.models import (
    BudgetRead,
    ContributionRead,
    DatasetRead,
    FitQuoteRead,
    JobRead,
    ModelExportRead,
    ModelRead,
    ModelSummary,
    SiteRead,
    SiteWithKey,
    StudyRead,
    StudySpecIn,
)

__all__ = ["AsyncClient", "AsyncJob"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


async def _run(function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    return await asyncio.to_thread(function, *args, **kwargs)


class AsyncJob:
    """A job whose waiting does not block the event loop."""

    def __init__(self, job: Job) -> None:
        self.job = job

    def __repr__(self) -> str:
        return repr(self.job)

    @property
    def id(self) -> str:
        """The job's id."""
        return self.job.id

    @property
    def state(self) -> JobRead:
        """The last known state."""
        return self.job.state

    @property
    def status(self) -> str:
        """``queued``, ``running``, ``succeeded``, ``failed`` or ``cancelled``."""
        return self.job.status

    @property
    def model_id(self) -> str | None:
        """The resulting model, once the job has succeeded."""
        return self.job.model_id

    async def wait(
        self,
        timeout: float | None = None,
        *,
        progress: bool | ProgressCallback = False,
        raise_on_failure: bool = True,
    ) -> AsyncJob:
        """Wait (long polls) until the job ends; as :meth:`Job.wait`."""
        await _run(self.job.wait, timeout, progress=progress, raise_on_failure=raise_on_failure)
        return self

    async def cancel(self) -> AsyncJob:
        """Ask the server to cancel the job."""
        await _run(self.job.cancel)
        return self

    async def model(self) -> ModelRead:
        """The model the job produced (waits for the job first)."""
        return await _run(self.job.model)


class AsyncClient:
    """The asyncio form of :class:`~privfit_client.Client` (same arguments)."""

    def __init__(self, base_url: str | None = None, key: str | None = None, **options: Any):
        self.sync = Client(base_url, key, **options)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections."""
        await _run(self.sync.close)

    async def me(self) -> SiteRead:
        """The calling site."""
        return await _run(self.sync.me)

    async def create_site(self, name: str) -> SiteWithKey:
        """Create a site (admin key)."""
        return await _run(self.sync.create_site, name)

    async def deactivate_site(self, site_id: str) -> SiteRead:
        """Deactivate a site (admin key; see :meth:`Client.deactivate_site`)."""
        return await _run(self.sync.deactivate_site, site_id)

    async def upload(self, data: DataSource, spec: SpecSource) -> DatasetRead:
        """Upload a dataset (see :meth:`Client.upload`)."""
        return await _run(self.sync.upload, data, spec)

    async def datasets(self, *, include_deleted: bool = False) -> list[DatasetRead]:
        """The calling site's datasets."""
        return await _run(self.sync.datasets, include_deleted=include_deleted)

    async def budget(self, dataset_id: str) -> BudgetRead:
        """A dataset's budget and charges."""
        return await _run(self.sync.budget, dataset_id)

    async def fit(
        self,
        dataset_id: str,
        mechanism: str = "objective_perturbation",
        *,
        epsilon: float | None,
        regularization: float | str = "auto",
        delta: float = 0.0,
        loss: str | None = None,
        params: Mapping[str, Any] | None = None,
        wait: float | None = None,
        idempotency_key: str | None = None,
    ) -> AsyncJob:
        """Charge the budget and queue a fit (see :meth:`Client.fit`)."""
        job = await _run(
            self.sync.fit,
            dataset_id,
            mechanism,
            epsilon=epsilon,
            regularization=regularization,
            delta=delta,
            loss=loss,
            params=params,
            wait=wait,
            idempotency_key=idempotency_key,
        )
        return AsyncJob(job)

    async def quote_fit(
        self,
        dataset_id: str,
        mechanism: str = "objective_perturbation",
        *,
        epsilon: float | None,
        regularization: float | str = "auto",
        delta: float = 0.0,
        loss: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> FitQuoteRead:
        """The dry run of :meth:`fit`."""
        return await _run(
            self.sync.quote_fit,
            dataset_id,
            mechanism,
            epsilon=epsilon,
            regularization=regularization,
            delta=delta,
            loss=loss,
            params=params,
        )

    async def job(self, job_id: str, *, wait: float = 0.0) -> AsyncJob:
        """One job (``wait`` > 0: long poll)."""
        return AsyncJob(await _run(self.sync.job, job_id, wait=wait))

    async def jobs(self) -> list[AsyncJob]:
        """The calling site's jobs."""
        return [AsyncJob(job) for job in await _run(self.sync.jobs)]

    async def model(self, model_id: str) -> ModelRead:
        """A model."""
        return await _run(self.sync.model, model_id)

    async def models(self) -> list[ModelSummary]:
        """The models the calling site can read."""
        return await _run(self.sync.models)

    async def predict(self, model_id: str, rows: Any) -> Any:
        """Predictions for rows or a DataFrame, in batches (see :meth:`Client.predict`)."""
        return await _run(self.sync.predict, model_id, rows)

    async def export(self, model_id: str) -> ModelExportRead:
        """The model's JSON export document."""
        return await _run(self.sync.export, model_id)

    async def create_study(
        self, name: str, members: Sequence[str], spec: StudySpecIn | SpecSource
    ) -> StudyRead:
        """Create a study as its coordinator."""
        return await _run(self.sync.create_study, name, members, spec)

    async def studies(self) -> list[StudyRead]:
        """The studies the calling site belongs to."""
        return await _run(self.sync.studies)

    async def study(self, study_id: str) -> StudyRead:
        """One study."""
        return await _run(self.sync.study, study_id)

    async def contribute(
        self,
        study_id: str,
        *,
        model_id: str | None = None,
        dataset_id: str | None = None,
        epsilon_cap: float | None = None,
        delta_cap: float = 0.0,
    ) -> ContributionRead:
        """Contribute a model or grant part of a dataset's budget."""
        return await _run(
            self.sync.contribute,
            study_id,
            model_id=model_id,
            dataset_id=dataset_id,
            epsilon_cap=epsilon_cap,
            delta_cap=delta_cap,
        )

    async def aggregate(
        self,
        study_id: str,
        method: Literal["average", "feature", "transfer"] = "average",
        *,
        wait: float | None = None,
        **fields: Any,
    ) -> AsyncJob:
        """Combine the study's contributed models (see :meth:`Client.aggregate`)."""
        return AsyncJob(await _run(self.sync.aggregate, study_id, method, wait=wait, **fields))

    async def federated_fit(
        self, study_id: str, protocol: str, *, epsilon: float | None, **fields: Any
    ) -> AsyncJob:
        """A federated fit across the study's granted datasets."""
        job = await _run(self.sync.federated_fit, study_id, protocol, epsilon=epsilon, **fields)
        return AsyncJob(job)
