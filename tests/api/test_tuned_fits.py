"""Fits with candidate regularisations: private tuning within the request's (ε, δ)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import SiteHandle
from tests.unit.jobs._flow import budget, fit_body, toy_csv, upload

PROBLEM_JSON = "application/problem+json"
WAIT = {"Prefer": "wait=30"}


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL (marked ``postgres``)."""
    return any_db_url


def _body(candidates: Any, **fields: Any) -> dict[str, Any]:
    return {**fit_body("output_perturbation", epsilon=1.0, **fields), "regularization": candidates}


def test_a_tuned_fit_charges_once_and_records_the_choice(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=600, seed=4))
    candidates = [1e-3, 1e-2, 1e-1]
    body = _body({"candidates": candidates})
    dry = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true", json=body, headers=site.headers
    )
    assert dry.status_code == 200, dry.text
    quote = dry.json()
    assert quote["cost"] == {"epsilon": 1.0, "delta": 0.0}
    assert quote["calibration"]["tuning"] == {
        "candidates": candidates,
        "part_size": 150,
        "parts": 4,
    }
    # calibrated at the part size: n = 150
    assert quote["calibration"]["n"] == 150

    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=body, headers={**site.headers, **WAIT}
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["kind"] == "tuned_fit"
    assert job["status"] == "succeeded", job
    assert job["charges"] == [
        {"dataset_id": dataset["id"], "epsilon": 1.0, "delta": 0.0, "state": "charged"}
    ]
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == pytest.approx(1.0)
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    tuning = model["privacy"]["tuning"]
    assert tuning["candidates"] == candidates
    assert tuning["chosen_regularization"] in candidates
    assert tuning["part_sizes"] == [150, 150, 150, 150]
    assert tuning["epsilon_split"]["total"] == 1.0
    assert model["privacy"]["epsilon"] == 1.0


@pytest.mark.parametrize(
    "candidates",
    [
        {"candidates": []},
        {"candidates": [1e-3] * 11},
        {"candidates": [0.0]},
        {"candidates": [-1.0, 1e-3]},
        {"candidates": [1e-3, 1e-3]},
        {"candidates": "x"},
        {"values": [1e-3]},
    ],
)
def test_bad_candidate_lists_are_422_and_charge_nothing(
    client: TestClient, site: SiteHandle, candidates: Any
) -> None:
    dataset = upload(client, site.headers)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=_body(candidates), headers=site.headers
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    assert budget(client, site.headers, dataset["id"])["charges"] == []
    assert client.get("/v1/jobs", headers=site.headers).json()["total"] == 0


def test_too_many_candidates_for_the_rows_is_422(client: TestClient, site: SiteHandle) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=15, seed=1))
    body = _body({"candidates": [1e-3 * (i + 1) for i in range(10)]})
    response = client.post(f"/v1/datasets/{dataset['id']}/fits", json=body, headers=site.headers)
    assert response.status_code == 422, response.text
    assert budget(client, site.headers, dataset["id"])["charges"] == []


def test_a_non_private_mechanism_cannot_be_tuned(client: TestClient, site: SiteHandle) -> None:
    dataset = upload(client, site.headers)
    body = {**fit_body("non_private", epsilon=None), "regularization": {"candidates": [0.01]}}
    response = client.post(f"/v1/datasets/{dataset['id']}/fits", json=body, headers=site.headers)
    assert response.status_code == 422, response.text
