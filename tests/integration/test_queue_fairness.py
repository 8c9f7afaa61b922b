"""The distributed queue's fair claim on PostgreSQL (issue 26 §4): queue rows carry start
tags, and ``FairJobManager.fetch_job`` (what every ``privfit worker`` calls) starts them
round-robin between sites and keeps a site within its share of the live workers.

Workers are procrastinate's own rows (registered by its SQL function) and their claims the
manager's ``fetch_job`` called directly, so no process is started; the end-to-end run with
real workers is ``tests/e2e/test_queue.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from functools import partial

import pytest
from sqlalchemy import Engine, text

from service.db.queue import QUEUE_NAME, defer_in_transaction, queue_app
from service.db.session import make_engine
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.fits.submit import FitRequest, submit_fit
from service.runtime.queue_runner import SharePolicy
from tests.integration.test_charged_jobs import make_dataset, make_site

pytestmark = pytest.mark.postgres

FIT = FitRequest(mechanism="objective_perturbation", epsilon=0.1, regularization=0.01)


class Scheduler:
    """The queue runner's enqueue step alone, with the fair start tags."""

    def __init__(self, database_url: str) -> None:
        self.app = queue_app(database_url)
        self.policy = SharePolicy(0.5)

    def enqueue_in_transaction(self, uow: UnitOfWork, job_id: str) -> None:
        defer_in_transaction(self.app, uow, job_id, policy=self.policy)

    def submit(self, job_id: str) -> None:
        """Nothing: the job was queued with its charge."""


@pytest.fixture
def db_url(postgres_url: str) -> str:
    return postgres_url


@pytest.fixture
def engine(postgres_url: str) -> Iterator[Engine]:
    engine = make_engine(postgres_url, pool_size=2)
    yield engine
    engine.dispose()


class Queue:
    """Sites submitting fits through the domain, and workers claiming like ``privfit
    worker`` does."""

    def __init__(self, uow_factory: UnitOfWorkFactory, url: str, engine: Engine, share: float):
        self.uow_factory = uow_factory
        self.engine = engine
        self.scheduler = Scheduler(url)
        self.app = queue_app(url, policy=SharePolicy(share), live_worker_seconds=30.0)
        self.sites: dict[str, tuple[Principal, str]] = {}
        self.names: dict[str, str] = {}  # job id -> name

    def submit(self, site: str, name: str) -> None:
        if site not in self.sites:
            owner = make_site(self.uow_factory)
            self.sites[site] = (owner, make_dataset(self.uow_factory, owner, epsilon=5.0))
        owner, dataset = self.sites[site]
        job = submit_fit(
            self.uow_factory(),
            dataset_id=dataset,
            request=FIT,
            actor=owner,
            runner=self.scheduler,
        )
        self.names[job.job.id] = name

    def worker(self) -> int:
        with self.engine.begin() as connection:
            worker = connection.execute(
                text("SELECT worker_id FROM procrastinate_register_worker_v1()")
            ).scalar_one()
        return int(worker)

    def claim(self, *workers: int) -> list[str | None]:
        """Each worker's claim, all at once; the names of the jobs they got (None: nothing)."""

        async def claims() -> list[str | None]:
            async with self.app.open_async():
                found = await asyncio.gather(
                    *(self.app.job_manager.fetch_job([QUEUE_NAME], w) for w in workers)
                )
            return [
                None if job is None else self.names[str(job.task_kwargs["job_id"])] for job in found
            ]

        return asyncio.run(claims())

    def finish(self, name: str) -> None:
        job_id = next(j for j, n in self.names.items() if n == name)
        with self.engine.begin() as connection:
            connection.execute(
                text(
                    "UPDATE procrastinate_jobs SET status = 'succeeded' "
                    "WHERE args ->> 'job_id' = :job AND status = 'doing'"
                ),
                {"job": job_id},
            )


@pytest.fixture
def make_queue(uow_factory: UnitOfWorkFactory, postgres_url: str, engine: Engine) -> partial[Queue]:
    return partial(Queue, uow_factory, postgres_url, engine)


def test_site_b_starts_while_site_a_holds_its_share(make_queue: partial[Queue]) -> None:
    queue = make_queue(share=0.5)
    first, second = queue.worker(), queue.worker()  # two slots: one per site at most
    for name in ("A1", "A2", "A3"):
        queue.submit("A", name)
    assert queue.claim(first) == ["A1"]
    assert queue.claim(second) == [None]  # the second slot is kept for other sites
    queue.submit("B", "B1")
    assert queue.claim(second) == ["B1"]
    queue.finish("A1")
    assert queue.claim(first) == ["A2"]


def test_sites_take_turns(make_queue: partial[Queue]) -> None:
    queue = make_queue(share=1.0)
    worker = queue.worker()
    for name in ("A1", "A2", "A3"):
        queue.submit("A", name)
    for name in ("B1", "B2"):
        queue.submit("B", name)
    order: list[str | None] = []
    for _ in range(5):
        (claimed,) = queue.claim(worker)
        order.append(claimed)
        assert claimed is not None
        queue.finish(claimed)
    assert order == ["A1", "B1", "A2", "B2", "A3"]
    assert queue.claim(worker) == [None]


def test_simultaneous_claims_start_one_job_of_each_site(make_queue: partial[Queue]) -> None:
    """Claims are serialised (an advisory lock): the second sees what the first started, so
    two workers claiming at once get A's first job and B's, never A's two nor one nothing."""
    queue = make_queue(share=0.5)
    workers = [queue.worker(), queue.worker()]
    for site, name in (("A", "A1"), ("A", "A2"), ("B", "B1")):
        queue.submit(site, name)
    assert sorted(map(str, queue.claim(*workers))) == ["A1", "B1"]
