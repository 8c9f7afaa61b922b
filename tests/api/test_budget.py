"""A dataset's privacy budget through HTTP (issue 4 item 2, docs/design.md §2 "Ledger semantics").

Runs on SQLite and PostgreSQL: ``GET /v1/datasets/{id}/budget`` shows the caps, the amounts
spent and remaining and every charge; the arithmetic is exact (ten fits of ε = 0.1 spend
ε_total = 1.0 exactly and an eleventh is a 409 ``budget-exhausted`` that states what remains);
a dry run spends nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.db.uow import UnitOfWorkFactory
from tests.api.test_datasets import assert_problem, base_spec, csv_bytes, upload, wait_for_job
from tests.conftest import MakeSite, SiteHandle

FIT = {"mechanism": "output_perturbation", "epsilon": 0.1, "regularization": 0.1}


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def new_dataset(
    client: TestClient, site: SiteHandle, *, epsilon: float = 1.0, delta: float = 1e-6
) -> str:
    response = upload(
        client, site, csv_bytes(), base_spec(budget={"epsilon": epsilon, "delta": delta})
    )
    assert response.status_code == 201, response.text
    dataset_id: str = response.json()["id"]
    return dataset_id


def budget(client: TestClient, site: SiteHandle, dataset_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def post_fit(
    client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any], **params: Any
) -> Any:
    return client.post(
        f"/v1/datasets/{dataset_id}/fits", json=body, headers=site.headers, params=params
    )


def test_new_dataset_has_its_whole_budget(client: TestClient, site: SiteHandle) -> None:
    dataset_id = new_dataset(client, site, epsilon=2.5, delta=1e-5)
    assert budget(client, site, dataset_id) == {
        "dataset_id": dataset_id,
        "epsilon_total": 2.5,
        "epsilon_spent": 0.0,
        "epsilon_remaining": 2.5,
        "delta_total": 1e-5,
        "delta_spent": 0.0,
        "delta_remaining": 1e-5,
        "charges": [],
    }


def test_ten_fits_of_a_tenth_spend_exactly_one_and_the_eleventh_is_refused(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory
) -> None:
    dataset_id = new_dataset(client, site, epsilon=1.0)
    before = datetime.now(UTC)
    job_ids: list[str] = []
    for i in range(10):
        response = post_fit(client, site, dataset_id, FIT)
        assert response.status_code == 202, (i, response.text)
        job = response.json()
        assert response.headers["Location"] == f"/v1/jobs/{job['id']}"
        assert job["charges"] == [
            {"dataset_id": dataset_id, "epsilon": 0.1, "delta": 0.0, "state": "charged"}
        ]
        job_ids.append(job["id"])

    refused = post_fit(client, site, dataset_id, FIT)
    problem = assert_problem(refused, 409, "budget-exhausted")
    assert problem["type"].endswith("budget-exhausted")
    assert problem["remaining_epsilon"] == 0.0
    assert problem["remaining_delta"] == 1e-6
    assert problem["requested_epsilon"] == 0.1
    assert problem["dataset_id"] == dataset_id
    assert "remaining ε=0.0" in problem["detail"]
    assert "Nothing was charged" in problem["detail"]

    for job_id in job_ids:
        assert wait_for_job(client, site, job_id)["status"] == "succeeded"

    state = budget(client, site, dataset_id)
    assert state["epsilon_total"] == 1.0
    assert state["epsilon_spent"] == 1.0  # exactly: the ledger adds integers, not floats
    assert state["epsilon_remaining"] == 0.0
    assert (state["delta_total"], state["delta_spent"], state["delta_remaining"]) == (
        1e-6,
        0.0,
        1e-6,
    )
    charges = state["charges"]
    assert sorted(c["job_id"] for c in charges) == sorted(job_ids)
    for charge in charges:
        assert charge["epsilon"] == 0.1
        assert charge["delta"] == 0.0
        assert charge["mechanism"] == "output_perturbation"
        assert charge["state"] == "charged"
        assert charge["refunded_at"] is None
        assert len(charge["id"]) == 32
        created = datetime.fromisoformat(charge["created_at"])
        assert before <= created <= datetime.now(UTC)
    created_order = [datetime.fromisoformat(c["created_at"]) for c in charges]
    assert created_order == sorted(created_order)  # oldest first

    with uow_factory() as uow:
        row = uow.datasets.get(dataset_id)
        assert row is not None
        assert row.epsilon_spent_units == row.epsilon_cap_units == 1_000_000_000
        assert sum(c.epsilon_units for c in uow.ledger.charges_for_dataset(dataset_id)) == (
            1_000_000_000
        )


def test_a_fit_larger_than_what_remains_is_refused_and_a_smaller_one_fits(
    client: TestClient, site: SiteHandle
) -> None:
    dataset_id = new_dataset(client, site, epsilon=1.0)
    assert post_fit(client, site, dataset_id, {**FIT, "epsilon": 0.7}).status_code == 202
    problem = assert_problem(
        post_fit(client, site, dataset_id, {**FIT, "epsilon": 0.4}), 409, "budget-exhausted"
    )
    assert problem["remaining_epsilon"] == pytest.approx(0.3, abs=1e-12)
    assert problem["requested_epsilon"] == 0.4
    assert post_fit(client, site, dataset_id, {**FIT, "epsilon": 0.3}).status_code == 202
    state = budget(client, site, dataset_id)
    assert state["epsilon_spent"] == 1.0
    assert [c["epsilon"] for c in state["charges"]] == [0.7, 0.3]


def test_delta_is_charged_and_capped_exactly(client: TestClient, site: SiteHandle) -> None:
    dataset_id = new_dataset(client, site, epsilon=5.0, delta=1e-6)
    gaussian = {
        "mechanism": "gaussian_objective_perturbation",
        "epsilon": 0.5,
        "delta": 4e-7,
        "regularization": 0.1,
    }
    job = post_fit(client, site, dataset_id, gaussian)
    assert job.status_code == 202, job.text
    assert post_fit(client, site, dataset_id, gaussian).status_code == 202
    problem = assert_problem(post_fit(client, site, dataset_id, gaussian), 409, "budget-exhausted")
    assert problem["remaining_delta"] == pytest.approx(2e-7, rel=1e-12)
    assert "δ short" in problem["detail"]
    state = budget(client, site, dataset_id)
    assert state["delta_spent"] == 8e-7
    assert state["delta_remaining"] == pytest.approx(2e-7, rel=1e-12)
    assert state["epsilon_spent"] == 1.0
    assert [(c["epsilon"], c["delta"]) for c in state["charges"]] == [(0.5, 4e-7)] * 2
    assert wait_for_job(client, site, job.json()["id"])["status"] == "succeeded"


def test_dry_run_quotes_the_cost_and_spends_nothing(client: TestClient, site: SiteHandle) -> None:
    dataset_id = new_dataset(client, site, epsilon=1.0)
    before = budget(client, site, dataset_id)
    for _ in range(3):
        quote = post_fit(client, site, dataset_id, FIT, dry_run="true")
        assert quote.status_code == 200, quote.text
        body = quote.json()
        assert body["dry_run"] is True
        assert body["cost"] == {"epsilon": 0.1, "delta": 0.0}
        assert body["budget"] == {
            "remaining_epsilon": 1.0,
            "remaining_delta": 1e-6,
            "sufficient": True,
        }
        assert body["expected_noise_norm"] > 0
    assert budget(client, site, dataset_id) == before
    jobs = client.get("/v1/jobs", headers=site.headers)
    assert jobs.status_code == 200
    assert jobs.json()["total"] == 0

    # A quote larger than what remains says so, and still spends nothing.
    too_much = post_fit(client, site, dataset_id, {**FIT, "epsilon": 1.5}, dry_run="true")
    assert too_much.status_code == 200
    assert too_much.json()["budget"]["sufficient"] is False
    assert budget(client, site, dataset_id) == before


def test_invalid_fit_is_refused_before_anything_is_spent(
    client: TestClient, site: SiteHandle
) -> None:
    dataset_id = new_dataset(client, site)
    before = budget(client, site, dataset_id)
    for bad in (
        {**FIT, "mechanism": "telepathy"},
        {**FIT, "epsilon": -1.0},
        {**FIT, "mechanism": "non_private"},  # the dataset does not allow it
        {**FIT, "params": {"no_such_option": 1}},
    ):
        response = post_fit(client, site, dataset_id, bad)
        assert response.status_code == 422, (bad, response.text)
    assert budget(client, site, dataset_id) == before


def test_budget_of_another_site_and_for_the_admin_is_404(
    client: TestClient, make_site: MakeSite, admin_headers: dict[str, str]
) -> None:
    alice, bob = make_site(), make_site()
    dataset_id = new_dataset(client, alice)
    assert post_fit(client, alice, dataset_id, FIT).status_code == 202
    assert_problem(
        client.get(f"/v1/datasets/{dataset_id}/budget", headers=bob.headers), 404, "not-found"
    )
    assert_problem(post_fit(client, bob, dataset_id, FIT), 404, "not-found")
    assert_problem(post_fit(client, bob, dataset_id, FIT, dry_run="true"), 404, "not-found")
    as_admin = client.get(f"/v1/datasets/{dataset_id}/budget", headers=admin_headers)
    assert_problem(as_admin, 404, "not-found")
    assert budget(client, alice, dataset_id)["epsilon_spent"] == 0.1  # bob spent nothing
