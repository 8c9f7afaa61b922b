"""The distributed queue below HTTP, on PostgreSQL: a job is queued in the transaction that
charges it (both or neither), and the tasks of a silent worker are settled exactly once.

A "worker" here is what procrastinate's own SQL functions make of one (register, fetch, a
heartbeat moved into the past), so these run in a second without starting processes; the
end-to-end tests in ``tests/e2e/test_queue.py`` do the same with real, killed processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import pytest
from sqlalchemy import Engine, text

from service.db.base import utcnow
from service.db.queue import QUEUE_NAME, QueueStore, defer_in_transaction, queue_app
from service.db.session import make_engine
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.errors import BudgetExhaustedError
from service.domain.fits.submit import FitRequest, submit_fit
from service.domain.jobs.lifecycle import cancel_job
from service.runtime.queue_runner import settle_stalled_jobs
from tests.integration.test_charged_jobs import make_dataset, make_site

pytestmark = pytest.mark.postgres

FIT = FitRequest(mechanism="objective_perturbation", epsilon=0.5, regularization=0.01)


class Scheduler:
    """The queue runner's enqueue step alone (no listener, no sweeper threads)."""

    def __init__(self, database_url: str) -> None:
        self.app = queue_app(database_url)

    def enqueue_in_transaction(self, uow: UnitOfWork, job_id: str) -> None:
        defer_in_transaction(self.app, uow, job_id)

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


def tasks(engine: Engine) -> list[tuple[str, str]]:
    """(job id, status) of every queue row."""
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT args->>'job_id', status::text FROM procrastinate_jobs ORDER BY id")
        )
        return [(row[0], row[1]) for row in rows]


def fetch_as_a_worker(engine: Engine) -> tuple[int, int]:
    """Register a worker and let it fetch the next task: (worker id, task id)."""
    with engine.begin() as connection:
        worker = connection.execute(
            text("SELECT worker_id FROM procrastinate_register_worker_v1()")
        ).scalar_one()
        task = connection.execute(
            text("SELECT id FROM procrastinate_fetch_job_v2(CAST(:queues AS varchar[]), :worker)"),
            {"queues": [QUEUE_NAME], "worker": worker},
        ).scalar_one()
    return int(worker), int(task)


def silence(engine: Engine, worker: int) -> None:
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE procrastinate_workers SET last_heartbeat = NOW() - INTERVAL '1 hour' "
                "WHERE id = :worker"
            ),
            {"worker": worker},
        )


def test_a_job_is_queued_with_its_charge_and_not_without(
    uow_factory: UnitOfWorkFactory, postgres_url: str, engine: Engine
) -> None:
    owner = make_site(uow_factory)
    dataset_id = make_dataset(uow_factory, owner, epsilon=1.0)
    runner = Scheduler(postgres_url)
    submit = partial(submit_fit, dataset_id=dataset_id, request=FIT, actor=owner, runner=runner)

    first = submit(uow_factory()).job.id
    second = submit(uow_factory()).job.id
    with pytest.raises(BudgetExhaustedError):
        submit(uow_factory())  # nothing charged: nothing queued either

    assert tasks(engine) == [(first, "todo"), (second, "todo")]


def test_a_silent_workers_running_job_fails_once_with_its_budget_spent(
    uow_factory: UnitOfWorkFactory, postgres_url: str, engine: Engine
) -> None:
    owner = make_site(uow_factory)
    dataset_id = make_dataset(uow_factory, owner)
    runner = Scheduler(postgres_url)
    job_id = submit_fit(
        uow_factory(), dataset_id=dataset_id, request=FIT, actor=owner, runner=runner
    ).job.id
    worker, _task = fetch_as_a_worker(engine)
    with uow_factory() as uow:
        assert uow.jobs.claim(job_id, started_at=utcnow()) is not None
        uow.commit()
    store = QueueStore(engine)
    settle = partial(settle_stalled_jobs, store, uow_factory, stalled_seconds=60)

    assert settle() == 0  # the worker is alive: nothing to do
    silence(engine, worker)
    with ThreadPoolExecutor(4) as pool:  # every replica and worker noticing at once
        settled = list(pool.map(lambda _: settle(), range(4)))

    assert sum(settled) == 1
    with uow_factory() as uow:
        job = uow.jobs.get(job_id)
        assert job is not None
        assert job.status == "failed"
        assert job.error is not None
        assert job.error["type"] == "job-interrupted"
        assert [c.state for c in uow.ledger.charges_for_job(job_id)] == ["charged"]
    assert tasks(engine) == [(job_id, "failed")]


def test_a_task_fetched_but_never_started_goes_back_to_the_queue(
    uow_factory: UnitOfWorkFactory, postgres_url: str, engine: Engine
) -> None:
    owner = make_site(uow_factory)
    dataset_id = make_dataset(uow_factory, owner)
    runner = Scheduler(postgres_url)
    job_id = submit_fit(
        uow_factory(), dataset_id=dataset_id, request=FIT, actor=owner, runner=runner
    ).job.id
    worker, _task = fetch_as_a_worker(engine)
    silence(engine, worker)

    assert settle_stalled_jobs(QueueStore(engine), uow_factory, stalled_seconds=60) == 1

    assert tasks(engine) == [(job_id, "todo")]
    with uow_factory() as uow:
        job = uow.jobs.get(job_id)
        assert job is not None
        assert job.status == "queued"
    # Still cancellable and refundable: it never drew noise.
    cancelled = cancel_job(uow_factory(), job_id=job_id, actor=owner)
    assert cancelled.job.status == "cancelled"
    assert [c.state for c in cancelled.charges] == ["refunded"]
