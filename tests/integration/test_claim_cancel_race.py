"""A worker's claim racing a user's cancel on PostgreSQL, for real: two threads, two
connections, released together by a barrier.

Both are one conditional UPDATE on ``status = 'queued'`` (docs/design.md §2), so exactly one of them
wins each race: a job cancelled while queued is refunded exactly once (its charge ``refunded``,
the dataset's spent budget back down by exactly its cost) and never runs; a claimed job is never
refunded (the cancel becomes a request the running job honours) and the budget stays spent.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.db.base import utcnow
from service.db.uow import UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.errors import ConflictError
from service.domain.jobs.lifecycle import cancel_job
from tests.conftest import SiteHandle
from tests.unit.jobs._flow import HoldingRunner, budget, fit_body, toy_spec, upload

pytestmark = pytest.mark.postgres

RACES = 16
EPSILON = 0.25


@pytest.fixture
def db_url(postgres_url: str) -> str:
    return postgres_url


def _queue(client: TestClient, site: SiteHandle, dataset_id: str) -> str:
    response = client.post(
        f"/v1/datasets/{dataset_id}/fits", json=fit_body(epsilon=EPSILON), headers=site.headers
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


def _race(uow_factory: UnitOfWorkFactory, job_id: str, actor: Principal) -> tuple[bool, bool]:
    """Claim and cancel ``job_id`` at the same moment; (claimed, cancelled-while-queued)."""
    barrier = threading.Barrier(2, timeout=30)

    def claim() -> bool:
        with uow_factory() as uow:
            barrier.wait()
            job = uow.jobs.claim(job_id, started_at=utcnow())
            uow.commit()
        return job is not None

    def cancel() -> bool:
        uow = uow_factory()
        barrier.wait()
        return cancel_job(uow, job_id=job_id, actor=actor).job.status == "cancelled"

    with ThreadPoolExecutor(max_workers=2) as pool:
        claimed, cancelled = pool.submit(claim), pool.submit(cancel)
        return claimed.result(), cancelled.result()


def test_exactly_one_of_claim_and_cancel_wins_and_a_cancel_is_refunded_once(
    app: FastAPI, client: TestClient, site: SiteHandle
) -> None:
    app.state.job_runner = HoldingRunner()  # the jobs stay queued until the race
    uow_factory: UnitOfWorkFactory = app.state.uow_factory
    actor = Principal(role="site", site_id=site.id)
    dataset = upload(client, site.headers, spec=toy_spec(epsilon=RACES * EPSILON + 1.0))
    jobs = [_queue(client, site, dataset["id"]) for _ in range(RACES)]
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == RACES * EPSILON

    outcomes = {job_id: _race(uow_factory, job_id, actor) for job_id in jobs}

    for job_id, (claimed, cancelled) in outcomes.items():
        assert claimed != cancelled, f"job {job_id}: claimed={claimed}, cancelled={cancelled}"
        with uow_factory() as uow:
            job = uow.jobs.get(job_id)
            assert job is not None
            states = [c.state for c in uow.ledger.charges_for_job(job_id)]
        if claimed:
            assert job.status == "running"
            assert job.cancel_requested  # the cancel came as a request to the running job
            assert states == ["charged"]  # never refunded
        else:
            assert job.status == "cancelled"
            assert states == ["refunded"]  # refunded, once
            # A late claim and a second cancel change nothing.
            with uow_factory() as uow:
                assert uow.jobs.claim(job_id, started_at=utcnow()) is None
            with pytest.raises(ConflictError):
                cancel_job(uow_factory(), job_id=job_id, actor=actor)

    claims = sum(claimed for claimed, _ in outcomes.values())
    state = budget(client, site.headers, dataset["id"])
    assert state["epsilon_spent"] == pytest.approx(claims * EPSILON)
    refunded = [c for c in state["charges"] if c["state"] == "refunded"]
    assert len(refunded) == RACES - claims
