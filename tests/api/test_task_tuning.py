"""Private tuning and the planner on multi-class and numeric labels (issue 29), on SQLite and
PostgreSQL.

* A tuned fit (λ candidates) on a multi-class or numeric label is charged exactly its quote,
  records its selection (CMS or random repetition) and predicts the task's values; the
  selection's score is the task's (error count, or the clipped squared error at sensitivity
  64, stated in the record of a repetition).
* Refusals stay 422 with nothing charged: the squared loss on an ERM mechanism, random
  repetition with a mechanism that needs δ > 0.
* The planner answers with the task's calibration, the task's λ rule, simulated accuracy
  (multi-class, against the majority class) or RMSE in the label's units (numeric), and auto's
  rule per ε; a target accuracy on a numeric label is a 422.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.api.test_datasets import assert_problem
from tests.api.test_label_tasks import (
    CLASSES,
    LOWER,
    MULTICLASS,
    NUMERIC,
    ROWS,
    UPPER,
    _fit,
    _nothing_charged,
    _predict,
    uploaded,
)
from tests.conftest import SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def _tuned(
    client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Quote, then run a tuned fit: charged exactly the quote; (quote, model)."""
    quote = _fit(client, site, dataset_id, body, dry_run=True)
    assert quote.status_code == 200, quote.text
    response = _fit(client, site, dataset_id, body)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    assert budget["epsilon_spent"] == quote.json()["cost"]["epsilon"] == body["epsilon"]
    assert budget["delta_spent"] == quote.json()["cost"]["delta"]
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    return quote.json(), model


@pytest.mark.parametrize("selection", ["cms", "papernot_steinke"])
def test_a_tuned_multiclass_fit_selects_a_candidate_and_predicts_classes(
    client: TestClient, site: SiteHandle, selection: str
) -> None:
    dataset = uploaded(client, site, MULTICLASS)
    body = {
        "mechanism": "objective_perturbation",
        "epsilon": 1.0,
        "regularization": {"candidates": [0.01, 0.1]},
        "selection": selection,
    }
    quote, model = _tuned(client, site, dataset["id"], body)
    assert quote["calibration"]["tuning"]["selection"] == selection
    assert quote["calibration"]["task"] == "multiclass"
    tuning = model["privacy"]["tuning"]
    assert tuning["selection"] == selection
    assert tuning["chosen_regularization"] in (0.01, 0.1)
    if selection == "cms":
        assert "error counts (sensitivity 1)" in tuning["method"]
    assert model["task"] == "multiclass"
    assert all(p["predicted_class"] in CLASSES for p in _predict(client, site, model["id"]))


def test_a_tuned_huber_regression_fit_by_repetition_states_its_score(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, NUMERIC)
    body = {
        "mechanism": "objective_perturbation",
        "loss": "huber",
        "epsilon": 1.0,
        "regularization": {"candidates": [0.01, 0.1]},
        "selection": "liu_talwar",
    }
    _, model = _tuned(client, site, dataset["id"], body)
    tuning = model["privacy"]["tuning"]
    assert tuning["selection"] == "liu_talwar"
    assert "sensitivity 64" in tuning["per_repetition"]["score"]
    assert model["loss"] == "huber"
    assert all(LOWER <= p["value"] <= UPPER for p in _predict(client, site, model["id"]))


def test_a_tuned_adassp_fit_is_selected_by_cms_since_its_runs_need_delta(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, NUMERIC)
    body = {
        "mechanism": "adassp",
        "epsilon": 1.0,
        "delta": 1e-6,
        "regularization": {"candidates": [1e-6, 1e-2]},
    }
    quote, model = _tuned(client, site, dataset["id"], body)
    assert quote["calibration"]["tuning"]["selection"] == "cms"
    assert "δ > 0" in quote["calibration"]["tuning"]["selection_reason"]
    assert "(sensitivity 64)" in model["privacy"]["tuning"]["method"]
    assert model["mechanism"] == "adassp"
    assert model["loss"] == "squared"
    assert all(LOWER <= p["value"] <= UPPER for p in _predict(client, site, model["id"]))


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (
            {
                "mechanism": "objective_perturbation",
                "epsilon": 1.0,
                "regularization": {"candidates": [0.01, 0.1]},
            },
            "squared",
        ),
        (
            {
                "mechanism": "adassp",
                "epsilon": 1.0,
                "delta": 1e-6,
                "regularization": {"candidates": [0.01, 0.1]},
                "selection": "papernot_steinke",
            },
            "δ",
        ),
    ],
)
def test_a_tuned_regression_fit_that_cannot_run_is_a_422_with_nothing_charged(
    client: TestClient, site: SiteHandle, engine: Engine, body: dict[str, Any], needle: str
) -> None:
    dataset = uploaded(client, site, NUMERIC)
    for dry_run in (True, False):
        response = _fit(client, site, dataset["id"], body, dry_run=dry_run)
        assert response.status_code == 422, response.text
        assert needle in response.json()["detail"]
    _nothing_charged(client, site, engine, dataset["id"])


# ---- the planner ---------------------------------------------------------------------------


def _plan(
    client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any]
) -> dict[str, Any]:
    response = client.post(f"/v1/datasets/{dataset_id}/plans", json=body, headers=site.headers)
    assert response.status_code == 200, response.text
    out: dict[str, Any] = response.json()
    assert out["spent"] == {"epsilon": 0.0, "delta": 0.0}
    return out


def test_a_multiclass_plan_uses_the_task_calibration_rule_and_simulation(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    dataset = uploaded(client, site, MULTICLASS)
    reference = uploaded(client, site, MULTICLASS, allow_non_private=True)
    body = {
        "mechanism": "output_perturbation",
        "epsilons": [1.0],
        "regularizations": [0.1, "auto"],
        "reference_dataset_id": reference["id"],
        "repeats": 2,
        "seed": 3,
        "target_accuracy": 0.3,
    }
    plan = _plan(client, site, dataset["id"], body)
    fixed, auto = plan["points"]
    # output perturbation in ℝ^{dK}: ‖b‖ ~ Gamma(15, S/ε), S ≥ 2√2/(nλ) = 2√2/9
    assert fixed["expected_noise_norm"] >= 15 * 2 * math.sqrt(2.0) / 9.0
    assert fixed["expected_noise_norm"] <= 15 * 2 * math.sqrt(2.0) / 9.0 * (1 + 1e-6)
    assert auto["regularization_rule"]["inputs"]["noise_dimension"] == 15
    assert 0.0 <= fixed["simulated_accuracy"]["mean"] <= 1.0
    grades = [r[3] for r in ROWS]
    assert plan["majority_baseline"] == max(grades.count(c) for c in CLASSES) / len(grades)
    assert "below_majority_baseline" in fixed
    assert plan["target"]["accuracy"] == 0.3
    _nothing_charged(client, site, engine, dataset["id"])


def test_a_regression_plan_simulates_rmse_in_the_label_units(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, NUMERIC)
    reference = uploaded(client, site, NUMERIC, allow_non_private=True)
    body = {
        "mechanism": "adassp",
        "epsilons": [1.0],
        "delta": 1e-6,
        "regularizations": ["auto"],
        "reference_dataset_id": reference["id"],
        "repeats": 2,
        "seed": 1,
    }
    plan = _plan(client, site, dataset["id"], body)
    (point,) = plan["points"]
    assert point["regularization"] == 1e-10
    rmse = point["simulated_rmse"]
    assert 0.0 <= rmse["p10"] <= rmse["mean"] <= UPPER - LOWER
    assert rmse["draws"] == 2
    assert rmse["p10"] <= rmse["p50"] <= rmse["p90"]
    assert "simulated_accuracy" not in point
    assert plan["majority_baseline"] is None
    response = client.post(
        f"/v1/datasets/{dataset['id']}/plans",
        json={**body, "target_accuracy": 0.5},
        headers=site.headers,
    )
    problem = assert_problem(response, 422, "invalid-input")
    assert problem["errors"][0]["loc"] == ["body", "target_accuracy"]


@pytest.mark.parametrize(
    ("label", "delta", "mechanism"),
    [
        (MULTICLASS, 0.0, "objective_perturbation"),
        (NUMERIC, 1e-6, "adassp"),
        (NUMERIC, 0.0, "objective_perturbation"),
    ],
)
def test_an_auto_plan_shows_the_rule_choice_per_epsilon(
    client: TestClient,
    site: SiteHandle,
    engine: Engine,
    label: dict[str, Any],
    delta: float,
    mechanism: str,
) -> None:
    dataset = uploaded(client, site, label)
    body = {"mechanism": "auto", "epsilons": [0.5, 2.0], "delta": delta}
    plan = _plan(client, site, dataset["id"], body)
    assert [p["mechanism"] for p in plan["points"]] == [mechanism, mechanism]
    assert all(p["regularization_rule"] for p in plan["points"])
    assert any("private_baseline" in note for note in plan["notes"])
    # each point is the dry run of the same auto fit at its ε: without a public reference
    # the fit chooses and fits at ε less the private baseline's slice, and charges the slice
    for point in plan["points"]:
        quote = _fit(
            client,
            site,
            dataset["id"],
            {"mechanism": "auto", "epsilon": point["epsilon"], "delta": delta},
            dry_run=True,
        ).json()
        assert quote["mechanism"] == point["mechanism"]
        assert quote["regularization"] == point["regularization"]
        assert point["private_baseline"] == quote["expected_accuracy"]["private_baseline"]
        assert point["expected_accuracy"] == quote["expected_accuracy"]
        assert point["private_baseline"]["requested_epsilon"] == point["epsilon"]
        assert point["private_baseline"]["fit_epsilon"] < point["epsilon"]
        assert point["spent_epsilon"] == quote["cost"]["epsilon"] == point["epsilon"]
    _nothing_charged(client, site, engine, dataset["id"])
