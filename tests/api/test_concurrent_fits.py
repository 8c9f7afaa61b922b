"""Racing fit requests never overspend a budget (issue 4 item 6, docs/design.md §2 and §4).

On SQLite and on PostgreSQL: 100 fit requests of ε = 0.1 sent at once, from 100 threads
through one HTTP client, against a dataset with ε_total = 1.0. Exactly 10 are accepted (202),
charged, and their jobs succeed; the other 90 get 409 ``budget-exhausted``; the ledger holds
exactly 10 charges and spent is exactly 1.0. The requests really overlap: the app serves them
from its thread pool, each in its own database transaction.

Also: a retried request with the same ``Idempotency-Key`` (one after the other, or many at
once) returns the same job and is charged once.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx2 as httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from service.api.schemas.problem import PROBLEM_TYPE_BASE
from service.db.uow import UnitOfWorkFactory
from tests.api.test_datasets import assert_problem, base_spec, csv_bytes, upload, wait_for_job
from tests.conftest import SiteHandle

T = TypeVar("T")

FIT = {"mechanism": "output_perturbation", "epsilon": 0.1, "regularization": 0.1}
ONE_EPSILON_UNITS = 1_000_000_000


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def at_once(n: int, request: Callable[[int], T]) -> list[T]:
    """Run ``request(i)`` for i < n on n threads released together by a barrier."""
    start = threading.Barrier(n)

    def run(i: int) -> T:
        start.wait()
        return request(i)

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(run, range(n)))


def new_dataset(client: TestClient, site: SiteHandle) -> str:
    response = upload(client, site, csv_bytes(), base_spec(budget={"epsilon": 1.0, "delta": 0}))
    assert response.status_code == 201, response.text
    dataset_id: str = response.json()["id"]
    return dataset_id


def table_count(engine: Engine, table: str) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one())


def test_hundred_racing_fits_charge_exactly_ten(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory, engine: Engine
) -> None:
    dataset_id = new_dataset(client, site)

    def post(_: int) -> httpx.Response:
        return client.post(f"/v1/datasets/{dataset_id}/fits", json=FIT, headers=site.headers)

    responses = at_once(100, post)

    assert Counter(r.status_code for r in responses) == {202: 10, 409: 90}, [
        r.text for r in responses if r.status_code not in (202, 409)
    ]
    for refused in (r for r in responses if r.status_code == 409):
        problem = assert_problem(refused, 409, "budget-exhausted")
        assert problem["type"] == PROBLEM_TYPE_BASE + "budget-exhausted"
        assert problem["requested_epsilon"] == 0.1
        # Whoever was refused saw less than 0.1 left at that moment, and is told so.
        assert 0.0 <= problem["remaining_epsilon"] < 0.1
        assert "remaining ε=" in problem["detail"]
    accepted = [r.json()["id"] for r in responses if r.status_code == 202]
    assert len(set(accepted)) == 10

    for job_id in accepted:
        job = wait_for_job(client, site, job_id, timeout=60)
        assert job["status"] == "succeeded", job
        assert job["model_id"] is not None

    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    assert budget["epsilon_spent"] == 1.0
    assert budget["epsilon_remaining"] == 0.0
    assert sorted(c["job_id"] for c in budget["charges"]) == sorted(accepted)
    assert all(c["epsilon"] == 0.1 and c["state"] == "charged" for c in budget["charges"])
    with uow_factory() as uow:
        row = uow.datasets.get(dataset_id)
        assert row is not None
        assert row.epsilon_spent_units == ONE_EPSILON_UNITS
        charges = uow.ledger.charges_for_dataset(dataset_id)
        assert len(charges) == 10
        assert sum(c.epsilon_units for c in charges) == ONE_EPSILON_UNITS
    # The refused requests left nothing behind: no job, no charge, no model.
    assert table_count(engine, "job") == 10
    assert table_count(engine, "ledger_charge") == 10
    assert table_count(engine, "model") == 10
    late = client.post(f"/v1/datasets/{dataset_id}/fits", json=FIT, headers=site.headers)
    assert late.status_code == 409


def test_a_retried_request_returns_the_same_job_and_is_charged_once(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    dataset_id = new_dataset(client, site)
    headers = {**site.headers, "Idempotency-Key": "fit-2026-11-23-0001"}
    path = f"/v1/datasets/{dataset_id}/fits"

    first = client.post(path, json=FIT, headers=headers)
    assert first.status_code == 202, first.text
    assert "Idempotent-Replayed" not in first.headers
    again = client.post(path, json=FIT, headers=headers)
    assert again.status_code == 202, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Location"] == first.headers["Location"]

    # The same key for a different request is refused, spending nothing.
    reused = client.post(path, json={**FIT, "epsilon": 0.2}, headers=headers)
    body = assert_problem(reused, 422, "invalid-input")
    assert "Idempotency-Key" in body["detail"]

    assert wait_for_job(client, site, first.json()["id"])["status"] == "succeeded"
    replay_after_success = client.post(path, json=FIT, headers=headers)
    assert replay_after_success.json()["id"] == first.json()["id"]
    assert replay_after_success.json()["status"] == "succeeded"

    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    assert budget["epsilon_spent"] == 0.1
    assert len(budget["charges"]) == 1
    assert table_count(engine, "job") == 1


def test_racing_retries_with_one_key_make_one_job_and_one_charge(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    dataset_id = new_dataset(client, site)
    headers = {**site.headers, "Idempotency-Key": "racing-retry"}

    def post(_: int) -> httpx.Response:
        return client.post(f"/v1/datasets/{dataset_id}/fits", json=FIT, headers=headers)

    responses = at_once(24, post)
    assert [r.status_code for r in responses] == [202] * 24, [r.text for r in responses]
    job_ids = {r.json()["id"] for r in responses}
    assert len(job_ids) == 1
    replayed = [r.headers.get("Idempotent-Replayed") for r in responses]
    assert replayed.count(None) == 1
    assert replayed.count("true") == 23

    (job_id,) = job_ids
    assert wait_for_job(client, site, job_id)["status"] == "succeeded"
    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    assert budget["epsilon_spent"] == 0.1
    assert [c["job_id"] for c in budget["charges"]] == [job_id]
    assert table_count(engine, "job") == 1
    assert table_count(engine, "ledger_charge") == 1


def test_racing_keys_and_plain_requests_share_the_budget_exactly(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    """Ten distinct keys each sent four times, raced with 20 keyless requests: every key gets
    one job at most, and the budget still admits exactly ten charges in all."""
    dataset_id = new_dataset(client, site)

    def post(i: int) -> tuple[str | None, httpx.Response]:
        key = f"key-{i % 10}" if i < 40 else None
        headers = {**site.headers, **({"Idempotency-Key": key} if key else {})}
        response = client.post(f"/v1/datasets/{dataset_id}/fits", json=FIT, headers=headers)
        return key, response

    outcomes: list[tuple[str | None, Any]] = at_once(60, post)
    assert {r.status_code for _, r in outcomes} <= {202, 409}
    jobs_by_key: dict[str, set[str]] = {}
    for key, response in outcomes:
        if key is not None and response.status_code == 202:
            jobs_by_key.setdefault(key, set()).add(response.json()["id"])
    assert all(len(ids) == 1 for ids in jobs_by_key.values()), jobs_by_key
    accepted = {r.json()["id"] for _, r in outcomes if r.status_code == 202}
    assert len(accepted) == 10
    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    assert budget["epsilon_spent"] == 1.0
    assert sorted(c["job_id"] for c in budget["charges"]) == sorted(accepted)
    assert table_count(engine, "job") == 10
    for job_id in accepted:
        assert wait_for_job(client, site, job_id, timeout=60)["status"] == "succeeded"
