"""``regularization`` omitted or ``"auto"`` (issue 28 item 1): λ from public quantities, shown
in the quote, the job and the model's record, charged like a typed λ; the refusals are 422s
that charge nothing. On SQLite and PostgreSQL (the twin is heavy)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import SiteHandle
from tests.unit.jobs._flow import budget, fit_body, toy_csv, upload

PROBLEM_JSON = "application/problem+json"
WAIT = {"Prefer": "wait=30"}
#: The calibrated constants R and A of service/dp/analysis/regularization.py, restated here
#: so a change of them is a deliberate change of this test.
R, A = 10.0, 0.01


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL (marked ``postgres``)."""
    return any_db_url


def _without_lambda(mechanism: str = "objective_perturbation", **fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fit_body(mechanism, **fields).items() if k != "regularization"}


def _objective_lambda(n: int, d: int, epsilon: float) -> float:
    """By hand: λ = √(4An + 2m₂)/(nR), m₂ = 4d(d + 1)/ε² (Gamma(d, 2/ε) noise norm)."""
    m2 = 4.0 * d * (d + 1) / epsilon**2
    return math.sqrt(4.0 * A * n + 2.0 * m2) / (n * R)


def _dry(client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any]) -> Any:
    return client.post(
        f"/v1/datasets/{dataset_id}/fits?dry_run=true", json=body, headers=site.headers
    )


def _untouched(client: TestClient, site: SiteHandle, dataset_id: str) -> None:
    state = budget(client, site.headers, dataset_id)
    assert state["epsilon_spent"] == 0.0
    assert state["charges"] == []
    assert client.get("/v1/jobs", headers=site.headers).json()["total"] == 0


def test_an_omitted_lambda_is_chosen_by_the_rule_and_recorded(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=400, seed=3))
    n, d = dataset["n_rows"], dataset["n_features"]
    expected = _objective_lambda(n, d, 0.5)
    body = _without_lambda(epsilon=0.5)

    dry = _dry(client, site, dataset["id"], body)
    assert dry.status_code == 200, dry.text
    quote = dry.json()
    assert quote["regularization"] == pytest.approx(expected, rel=1e-12)
    rule = quote["regularization_rule"]
    assert rule["name"] == "excess_risk_minimiser"
    assert rule["inputs"] | {} == {
        "n": n,
        "d": d,
        "row_norm_bound": 1.0,
        "loss": "logistic",
        "c": 0.25,
        "epsilon": 0.5,
        "delta": 0.0,
    }
    assert rule["constants"] == {"R": R, "A": A}
    assert "√(4A·n + 2m₂)" in rule["formula"]
    assert quote["calibration"]["regularization"] == pytest.approx(expected, rel=1e-12)
    assert quote["calibration"]["regularization_rule"] == rule
    assert quote["cost"] == {"epsilon": 0.5, "delta": 0.0}
    _untouched(client, site, dataset["id"])

    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=body, headers={**site.headers, **WAIT}
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    assert job["params"]["regularization"] == pytest.approx(expected, rel=1e-12)
    assert job["params"]["regularization_rule"] == rule
    assert job["charges"] == [
        {"dataset_id": dataset["id"], "epsilon": 0.5, "delta": 0.0, "state": "charged"}
    ]
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    calibration = model["privacy"]["calibration"]
    assert calibration["regularization"] == pytest.approx(expected, rel=1e-12)
    assert calibration["regularization_rule"] == rule


def test_auto_is_the_same_as_omitted_and_a_number_is_kept(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    omitted = _dry(client, site, dataset["id"], _without_lambda(epsilon=1.0)).json()
    auto = _dry(client, site, dataset["id"], fit_body(epsilon=1.0, regularization="auto"))
    assert auto.status_code == 200, auto.text
    assert auto.json()["regularization"] == omitted["regularization"]
    assert auto.json()["regularization_rule"] == omitted["regularization_rule"]

    typed = _dry(client, site, dataset["id"], fit_body(epsilon=1.0, regularization=0.001))
    assert typed.status_code == 200, typed.text
    assert typed.json()["regularization"] == 0.001
    assert typed.json()["regularization_rule"] is None
    assert "regularization_rule" not in typed.json()["calibration"]
    _untouched(client, site, dataset["id"])


def test_output_perturbation_auto_solves_its_cubic(client: TestClient, site: SiteHandle) -> None:
    dataset = upload(client, site.headers)
    n, d, eps, c = dataset["n_rows"], dataset["n_features"], 1.0, 0.25
    quote = _dry(client, site, dataset["id"], _without_lambda("output_perturbation", epsilon=eps))
    assert quote.status_code == 200, quote.text
    lam = quote.json()["regularization"]
    # the rule's λ is the positive root of (R²/2)λ³ − pλ − q (by hand)
    p = 2.0 * A / n + 2.0 * d * (d + 1) / (n * n * eps * eps)
    q = 4.0 * c * (d + 1) / (n * n * eps * eps)
    assert R * R / 2 * lam**3 - p * lam - q == pytest.approx(0.0, abs=1e-9 * q)
    assert quote.json()["calibration"]["regularization"] == lam


def test_non_private_auto(client: TestClient, make_site: Any) -> None:
    site = make_site()
    dataset = upload(client, site.headers)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true",
        json=_without_lambda("non_private", epsilon=None),
        headers=site.headers,
    )
    # the toy dataset does not allow non-private fits: that refusal wins, nothing charged
    assert response.status_code == 422, response.text
    _untouched(client, site, dataset["id"])


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(_without_lambda("dp_sgd"), id="dp_sgd-omitted"),
        pytest.param(fit_body("dp_sgd", regularization="auto"), id="dp_sgd-auto"),
        pytest.param(fit_body("stacking_features", regularization="auto"), id="stacking-auto"),
        pytest.param(
            fit_body("dp_sgd", regularization="auto", params={"eta": {"candidates": [0.1, 1.0]}}),
            id="auto-with-step-size-candidates",
        ),
        pytest.param(
            _without_lambda("dp_sgd", params={"eta": {"candidates": [0.1, 1.0]}}),
            id="omitted-with-step-size-candidates",
        ),
        pytest.param(
            fit_body(regularization={"candidates": ["auto", 0.01]}), id="auto-among-candidates"
        ),
        pytest.param(fit_body(regularization="AUTO"), id="auto-misspelt"),
        pytest.param(fit_body(epsilon=None, regularization="auto"), id="auto-without-epsilon"),
    ],
)
def test_auto_refusals_are_422_and_charge_nothing(
    client: TestClient, site: SiteHandle, body: dict[str, Any]
) -> None:
    dataset = upload(client, site.headers)
    for dry_run in ("true", "false"):
        response = client.post(
            f"/v1/datasets/{dataset['id']}/fits?dry_run={dry_run}",
            json=body,
            headers=site.headers,
        )
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith(PROBLEM_JSON)
    _untouched(client, site, dataset["id"])


def test_a_plan_with_auto_gives_the_rules_lambda_at_each_epsilon(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    n, d = dataset["n_rows"], dataset["n_features"]
    body = {
        "mechanism": "objective_perturbation",
        "epsilons": [0.1, 1.0],
        "regularizations": ["auto", 0.01],
    }
    response = client.post(f"/v1/datasets/{dataset['id']}/plans", json=body, headers=site.headers)
    assert response.status_code == 200, response.text
    points = response.json()["points"]
    auto = [p for p in points if "regularization_rule" in p]
    assert [p["epsilon"] for p in auto] == [0.1, 1.0]
    for point in auto:
        assert point["regularization"] == pytest.approx(
            _objective_lambda(n, d, point["epsilon"]), rel=1e-12
        )
        assert point["regularization_rule"]["inputs"]["epsilon"] == point["epsilon"]
    assert sorted(p["regularization"] for p in points if "regularization_rule" not in p) == [
        0.01,
        0.01,
    ]
    svg = client.post(
        f"/v1/datasets/{dataset['id']}/plans",
        json=body,
        headers={**site.headers, "Accept": "image/svg+xml"},
    )
    assert svg.status_code == 200, svg.text
    assert "λ = auto" in svg.text
    assert "λ = 0.01" in svg.text
    assert budget(client, site.headers, dataset["id"])["charges"] == []


@pytest.mark.parametrize(
    "body",
    [
        {"mechanism": "dp_sgd", "epsilons": [0.5], "regularizations": ["auto"]},
        {"mechanism": "objective_perturbation", "epsilons": [0.5], "regularizations": ["Auto"]},
    ],
)
def test_bad_auto_plans_are_422(client: TestClient, site: SiteHandle, body: dict[str, Any]) -> None:
    dataset = upload(client, site.headers)
    response = client.post(f"/v1/datasets/{dataset['id']}/plans", json=body, headers=site.headers)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)


def test_an_auto_fit_retried_with_its_key_is_charged_once(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    url = f"/v1/datasets/{dataset['id']}/fits"
    headers = {**site.headers, "Idempotency-Key": "auto-lambda-1", **WAIT}
    first = client.post(url, json=_without_lambda(epsilon=0.5), headers=headers)
    assert first.status_code == 201, first.text
    # omitted and "auto" are the same request: the same λ, so the same job
    again = client.post(url, json=fit_body(epsilon=0.5, regularization="auto"), headers=headers)
    assert again.status_code in (200, 201, 202), again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    state = budget(client, site.headers, dataset["id"])
    assert [c["job_id"] for c in state["charges"]] == [first.json()["id"]]


def test_noisy_gd_auto_lambda_is_the_gd_rule_and_is_charged_like_a_typed_one(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=400, seed=3))
    n, d = dataset["n_rows"], dataset["n_features"]
    body = fit_body(
        "noisy_gd", epsilon=0.5, delta=1e-6, regularization="auto", params={"iterations": 10}
    )
    dry = _dry(client, site, dataset["id"], body)
    assert dry.status_code == 200, dry.text
    quote = dry.json()
    rule = quote["regularization_rule"]
    # by hand from the record's μ: λ = √(4An + 2·8d/μ²)/(nR)
    mu = rule["terms"]["gdp_mu"]
    assert 0.0 < mu < 1.0
    assert quote["regularization"] == pytest.approx(
        math.sqrt(4 * A * n + 16 * d / mu**2) / (n * R), rel=1e-12
    )
    assert "8d/μ²" in rule["formula"]
    _untouched(client, site, dataset["id"])
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=body, headers={**site.headers, **WAIT}
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    assert job["charges"][0]["epsilon"] == 0.5
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    assert model["privacy"]["calibration"]["regularization_rule"] == rule
    assert model["privacy"]["calibration"]["regularization"] == quote["regularization"]
