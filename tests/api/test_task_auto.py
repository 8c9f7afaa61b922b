"""Dry runs, λ "auto" and mechanism "auto" on multi-class and numeric labels (issue 29), on
SQLite and PostgreSQL.

* A dry run of every private mechanism that fits the task quotes the task's calibration and
  charges nothing.
* An omitted λ is the rule of service.dp.analysis.regularization_tasks, checked against values
  computed by hand here (n = 90 rows, d = 5 encoded features, K = 3 classes, ε = 1, A = 0.01,
  R of the task and mechanism); AdaSSP's is the smallest λ (its own adaptive ridge
  regularises).
* ``auto`` picks from the registry by the stated rule (AdaSSP for a numeric label at δ > 0,
  objective perturbation otherwise), charges what it quoted, and the job and the model's
  record say why.
* Refusals (422, nothing charged): a mechanism without a λ rule, the squared loss on an ERM
  mechanism, mechanism options with auto.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.api.test_datasets import assert_problem
from tests.api.test_label_tasks import (
    LOWER,
    MULTICLASS,
    NUMERIC,
    UPPER,
    _fit,
    _nothing_charged,
    _predict,
    _private,
    uploaded,
)
from tests.conftest import SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

N, D, K = 90, 5, 3


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


# ---- dry runs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "mechanism"),
    [(MULTICLASS, m) for m in _private("multiclass")]
    + [(NUMERIC, m) for m in _private("regression")],
)
def test_a_dry_run_quotes_the_tasks_calibration_and_charges_nothing(
    client: TestClient, site: SiteHandle, engine: Engine, label: dict[str, Any], mechanism: str
) -> None:
    dataset = uploaded(client, site, label)
    body: dict[str, Any] = {
        "mechanism": mechanism,
        "epsilon": 1.0,
        "delta": 1e-6,
        "regularization": 0.05,
    }
    if label is NUMERIC and mechanism != "adassp":
        body["loss"] = "huber"
    response = _fit(client, site, dataset["id"], body, dry_run=True)
    assert response.status_code == 200, response.text
    quote = response.json()
    calibration = quote["calibration"]
    assert calibration["task"] == dataset["task"]
    if label is MULTICLASS:
        assert calibration["n_classes"] == K
    assert 0 < quote["cost"]["epsilon"] <= 1.0
    _nothing_charged(client, site, engine, dataset["id"])


# ---- λ "auto" ------------------------------------------------------------------------------


def _quote(client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any]) -> Any:
    response = _fit(client, site, dataset_id, body, dry_run=True)
    assert response.status_code == 200, response.text
    return response.json()


def test_an_omitted_lambda_on_a_multiclass_fit_is_the_task_rule(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    dataset = uploaded(client, site, MULTICLASS)
    assert dataset["n_features"] == D
    # objective perturbation: L² = 2, D = dK = 15, m₂ = 8·15·16 = 1920,
    # λ = √(4·0.01·2·90 + 2·1920)/(90·10) = √3847.2/900
    quote = _quote(
        client, site, dataset["id"], {"mechanism": "objective_perturbation", "epsilon": 1.0}
    )
    assert math.isclose(quote["regularization"], math.sqrt(3847.2) / 900.0, rel_tol=1e-12)
    rule = quote["regularization_rule"]
    assert rule["inputs"]["noise_dimension"] == 15
    assert rule["inputs"]["lipschitz"] == math.sqrt(2.0)
    assert "regularization_tasks" in rule["source"]
    assert quote["calibration"]["regularization_rule"] == rule
    # output perturbation (R = 5ε = 5 at ε = 1): the root of
    # (5²/2)λ³ − (2·0.01·2/90 + 2·2·15·16/(90²))λ − 4·2·(2/3)·16/90²
    out = _quote(client, site, dataset["id"], {"mechanism": "output_perturbation", "epsilon": 1.0})
    lam = out["regularization"]
    p = 0.04 / 90 + 960.0 / 8100.0
    q = 8.0 * (2.0 / 3.0) * 16.0 / 8100.0
    assert abs(5.0**2 / 2.0 * lam**3 - p * lam - q) < 1e-12
    assert out["regularization_rule"]["constants"] == {"R": pytest.approx(5.0), "A": 0.01}
    assert out["regularization_rule"]["formula"].endswith("R = 5ε")
    assert lam > 0
    _nothing_charged(client, site, engine, dataset["id"])


def test_an_omitted_lambda_on_a_huber_regression_fit_is_the_task_rule(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, NUMERIC)
    body = {
        "mechanism": "objective_perturbation",
        "epsilon": 1.0,
        "loss": "huber",
        "params": {"h": 0.5},
    }
    # L = h = 0.5, D = 5, R = 3: m₂ = 5·6·4·0.25 = 30, λ = √(4·0.01·0.25·90 + 60)/(90·3)
    quote = _quote(client, site, dataset["id"], body)
    assert math.isclose(quote["regularization"], math.sqrt(60.9) / 270.0, rel_tol=1e-12)


def test_adassp_automatic_lambda_is_the_smallest_so_its_own_ridge_regularises(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, NUMERIC)
    quote = _quote(
        client, site, dataset["id"], {"mechanism": "adassp", "epsilon": 1.0, "delta": 1e-6}
    )
    assert quote["regularization"] == 1e-10
    assert "AdaSSP" in quote["regularization_rule"]["formula"]


@pytest.mark.parametrize(
    ("label", "body", "needle"),
    [
        (MULTICLASS, {"mechanism": "dp_sgd", "epsilon": 1.0}, "no rule for 'dp_sgd'"),
        (NUMERIC, {"mechanism": "objective_perturbation", "epsilon": 1.0}, "huber loss only"),
    ],
)
def test_a_mechanism_or_loss_without_a_rule_is_a_422_with_nothing_charged(
    client: TestClient,
    site: SiteHandle,
    engine: Engine,
    label: dict[str, Any],
    body: dict[str, Any],
    needle: str,
) -> None:
    dataset = uploaded(client, site, label)
    for dry_run in (True, False):
        problem = assert_problem(
            _fit(client, site, dataset["id"], body, dry_run=dry_run), 422, "invalid-input"
        )
        assert needle in problem["detail"]
        assert problem["errors"][0]["loc"] == ["body", "regularization"]
    _nothing_charged(client, site, engine, dataset["id"])


# ---- mechanism "auto" ----------------------------------------------------------------------


def _auto_fit(
    client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Quote, fit; the quote, the job and the model (charged exactly the quote)."""
    quote = _quote(client, site, dataset_id, body)
    response = _fit(client, site, dataset_id, body)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    assert budget["epsilon_spent"] == quote["cost"]["epsilon"]
    assert budget["delta_spent"] == quote["cost"]["delta"]
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    return quote, job, model


def test_auto_on_a_multiclass_label_fits_objective_perturbation_and_says_why(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, MULTICLASS)
    quote, job, model = _auto_fit(
        client, site, dataset["id"], {"mechanism": "auto", "epsilon": 1.0}
    )
    assert quote["mechanism"] == job["params"]["mechanism"] == model["mechanism"]
    assert model["mechanism"] == "objective_perturbation"
    auto = quote["auto"]
    assert auto["task"] == "multiclass"
    assert auto["chosen"]["mechanism"] == "objective_perturbation"
    assert "order of preference" in auto["reason"]
    assert {c["mechanism"] for c in auto["candidates"]} == set(_private("multiclass"))
    assert next(c for c in auto["candidates"] if c["mechanism"] == "dp_sgd")["excluded"]
    # the λ rule at the fit's ε: the request's less the private baseline's 5 %
    fit_epsilon = quote["expected_accuracy"]["private_baseline"]["fit_epsilon"]
    assert math.isclose(
        quote["regularization"], math.sqrt(7.2 + 3840.0 / fit_epsilon**2) / 900.0, rel_tol=1e-12
    )
    assert job["params"]["requested_mechanism"] == "auto"
    assert model["privacy"]["auto"] == auto
    assert model["task"] == "multiclass"


@pytest.mark.parametrize(
    ("delta", "mechanism", "loss"),
    [(1e-6, "adassp", "squared"), (0.0, "objective_perturbation", "huber")],
)
def test_auto_on_a_numeric_label_fits_adassp_at_positive_delta_else_huber(
    client: TestClient, site: SiteHandle, delta: float, mechanism: str, loss: str
) -> None:
    dataset = uploaded(client, site, NUMERIC)
    quote, _, model = _auto_fit(
        client, site, dataset["id"], {"mechanism": "auto", "epsilon": 1.0, "delta": delta}
    )
    assert quote["mechanism"] == model["mechanism"] == mechanism
    assert model["loss"] == loss
    assert quote["auto"]["chosen"]["loss"] == loss
    assert model["privacy"]["auto"]["reason"] == quote["auto"]["reason"]
    assert all(LOWER <= p["value"] <= UPPER for p in _predict(client, site, model["id"]))


def test_auto_keeps_a_requested_lambda(client: TestClient, site: SiteHandle) -> None:
    dataset = uploaded(client, site, MULTICLASS)
    quote = _quote(
        client, site, dataset["id"], {"mechanism": "auto", "epsilon": 1.0, "regularization": 0.2}
    )
    assert quote["regularization"] == 0.2
    assert quote["auto"]["regularization_source"] == "request"


@pytest.mark.parametrize("label", [MULTICLASS, NUMERIC])
def test_auto_with_mechanism_options_is_a_422_with_nothing_charged(
    client: TestClient, site: SiteHandle, engine: Engine, label: dict[str, Any]
) -> None:
    dataset = uploaded(client, site, label)
    body = {"mechanism": "auto", "epsilon": 1.0, "params": {"rho": 0.1}}
    problem = assert_problem(_fit(client, site, dataset["id"], body), 422, "invalid-input")
    assert problem["errors"][0]["loc"] == ["body", "params"]
    _nothing_charged(client, site, engine, dataset["id"])
