"""``objective_perturbation`` with a public random projection over HTTP, on SQLite and on
PostgreSQL: ``params.projection_dim`` (with ``projection_kind``, ``projection_seed``) is quoted,
charged and run in k dimensions, the job and the model's privacy record show it, and every
refused combination is a 422 problem that charges and stores nothing."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.dp import calibrate
from tests.api.test_label_tasks import MULTICLASS, NUMERIC, uploaded
from tests.conftest import SiteHandle
from tests.unit.jobs._flow import TOY_FEATURES, budget, fit_body, toy_csv, upload, wait_job

WAIT = {"Prefer": "wait=30"}

PROBLEM_JSON = "application/problem+json"
N, D = 200, len(TOY_FEATURES)


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL (marked ``postgres``)."""
    return any_db_url


def test_a_projected_fit_is_charged_run_in_k_dimensions_and_recorded(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    params: dict[str, Any] = {"projection_dim": 2, "projection_seed": 7}
    body = fit_body("objective_perturbation", epsilon=0.5, params=params)
    path = f"/v1/datasets/{dataset['id']}/fits"

    quote = client.post(f"{path}?dry_run=true", json=body, headers=site.headers)
    assert quote.status_code == 200, quote.text
    expected = calibrate(
        "objective_perturbation", n=N, d=D, epsilon=0.5, regularization=0.01, **params
    ).details
    assert expected["noise_dimension"] == 2

    response = client.post(path, json=body, headers=site.headers)
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["params"]["params"] == params
    finished = wait_job(client, site.headers, job["id"])
    assert finished["status"] == "succeeded", finished

    model = client.get(f"/v1/models/{finished['model_id']}", headers=site.headers).json()
    record = model["privacy"]
    assert record["mechanism"] == "objective_perturbation"
    shown = record["calibration"]
    assert shown["noise_dimension"] == 2
    assert (shown["projection_dim"], shown["projection_kind"]) == (2, "gaussian")
    assert shown["projection_seed"] == 7
    assert shown["d"] == D
    assert shown["beta"] == expected["beta"]
    assert shown["certified_release"]["d"] == 2
    state = budget(client, site.headers, dataset["id"])
    assert state["epsilon_spent"] == pytest.approx(0.5, abs=1e-9)


def _refused(response: Any) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    found: dict[str, Any] = response.json()
    return found


def _nothing_charged(client: TestClient, site: SiteHandle, dataset_id: str) -> None:
    state = budget(client, site.headers, dataset_id)
    assert state["charges"] == []
    assert state["epsilon_spent"] == 0.0
    assert client.get("/v1/jobs", headers=site.headers).json()["total"] == 0


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"projection_kind": "achlioptas"}, "projection_kind needs projection_dim"),
        ({"projection_seed": 3}, "projection_seed needs projection_dim"),
        ({"projection_dim": D + 1}, "must not exceed the number of features d = 6, got 7"),
    ],
)
def test_bad_projection_options_are_a_422_with_nothing_charged(
    client: TestClient, site: SiteHandle, params: dict[str, Any], says: str
) -> None:
    dataset = upload(client, site.headers)
    body = fit_body("objective_perturbation", epsilon=0.5, params=params)
    for query in ("?dry_run=true", ""):
        problem = _refused(
            client.post(
                f"/v1/datasets/{dataset['id']}/fits{query}", json=body, headers=site.headers
            )
        )
        assert says in problem["detail"]
    _nothing_charged(client, site, dataset["id"])


@pytest.mark.parametrize(("label", "task"), [(MULTICLASS, "multiclass"), (NUMERIC, "regression")])
def test_a_projection_of_a_multiclass_or_numeric_label_is_a_422_with_nothing_charged(
    client: TestClient, site: SiteHandle, label: dict[str, Any], task: str
) -> None:
    dataset = uploaded(client, site, label)
    loss = "huber" if task == "regression" else "logistic"
    body = fit_body("objective_perturbation", epsilon=0.5, loss=loss, params={"projection_dim": 2})
    problem = _refused(
        client.post(f"/v1/datasets/{dataset['id']}/fits", json=body, headers=site.headers)
    )
    assert f"projection_dim is not offered for {task} fits" in problem["detail"]
    assert "binary (margin-loss) fits only" in problem["detail"]
    _nothing_charged(client, site, dataset["id"])


def _rule_lambda(n: int, dim: int, epsilon: float) -> float:
    """The λ rule for objective perturbation by hand (service.dp.analysis.regularization):
    λ = √(4A·n + 2m₂)/(n·R), m₂ = 4d′(d′ + 1)/ε², A = 0.01, R = 10, at the noise's d′."""
    m2 = 4.0 * dim * (dim + 1) / epsilon**2
    return math.sqrt(4.0 * 0.01 * n + 2.0 * m2) / (n * 10.0)


def test_lambda_auto_is_the_rule_at_the_projections_dimension(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    body = fit_body(
        "objective_perturbation", epsilon=0.5, regularization="auto", params={"projection_dim": 2}
    )
    quote = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true", json=body, headers=site.headers
    )
    assert quote.status_code == 200, quote.text
    shown = quote.json()
    # k = 2: m₂ = 4·2·3/0.25 = 96, λ = √(8 + 192)/2000 = 0.00707106781
    assert shown["regularization"] == pytest.approx(_rule_lambda(N, 2, 0.5), rel=1e-12)
    assert shown["regularization"] == pytest.approx(0.00707106781, rel=1e-9)
    inputs = shown["regularization_rule"]["inputs"]
    assert (inputs["d"], inputs["features_before_projection"]) == (2, D)
    assert shown["calibration"]["noise_dimension"] == 2

    plan = client.post(
        f"/v1/datasets/{dataset['id']}/plans",
        json={
            "mechanism": "objective_perturbation",
            "epsilons": [0.5],
            "regularizations": ["auto"],
            "params": {"projection_dim": 2},
        },
        headers=site.headers,
    )
    assert plan.status_code == 200, plan.text
    [point] = plan.json()["points"]
    assert point["regularization"] == pytest.approx(0.00707106781, rel=1e-9)
    assert point["regularization_rule"]["inputs"]["features_before_projection"] == D
    _nothing_charged(client, site, dataset["id"])


@pytest.mark.parametrize("selection", ["cms", "auto"])
def test_a_tuned_projected_fit_runs_every_candidate_in_k_dimensions(
    client: TestClient, site: SiteHandle, selection: str
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=600, seed=4))
    body = {
        **fit_body("objective_perturbation", epsilon=1.0, params={"projection_dim": 2}),
        "regularization": {"candidates": [1e-3, 1e-2, 1e-1]},
        "selection": selection,
    }
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=body, headers={**site.headers, **WAIT}
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    assert model["privacy"]["calibration"]["noise_dimension"] == 2
    assert model["privacy"]["calibration"]["projection_dim"] == 2
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == pytest.approx(1.0)
