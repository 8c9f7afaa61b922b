"""Never worse than the trivial model without a warning, for multi-class and numeric labels
(issue 29), on SQLite and PostgreSQL.

With a public reference (a dataset of the site uploaded with ``allow_non_private``, same spec
and label), a private fit's quote, job and model record carry the expected band against the
trivial model — accuracy against the reference's majority class, or RMSE in the label's units
against predicting the reference's mean — and a warning when the band is worse. Without a
reference a fit with a given λ has no band and no warning (auto fits estimate the baseline
privately: tests/api/test_task_private_baseline.py).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.test_label_tasks import (
    CLASSES,
    LOWER,
    MULTICLASS,
    NUMERIC,
    UPPER,
    _fit,
    csv_bytes,
    make_rows,
    upload,
    uploaded,
)
from tests.conftest import SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: The public reference rows: drawn like the private ones, from another seed.
REFERENCE_ROWS = make_rows(400, seed=11)
#: A multi-class reference where the majority class ("high") is clearly the most frequent:
#: every "high" row of 600 and every other "low"/"mid" row, in the order drawn.
SKEWED_ROWS = [r for i, r in enumerate(make_rows(600, seed=13)) if r[3] == "high" or i % 2 == 0]


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def _public_reference(
    client: TestClient,
    site: SiteHandle,
    label: dict[str, Any],
    rows: list[tuple[str, int, str, str, float]] = REFERENCE_ROWS,
) -> str:
    response = upload(client, site, label, data=csv_bytes(rows), allow_non_private=True)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _quote_job_model(
    client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    quote = _fit(client, site, dataset_id, body, dry_run=True)
    assert quote.status_code == 200, quote.text
    response = _fit(client, site, dataset_id, body)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    return quote.json(), job, model


def _codes(warnings: list[dict[str, Any]] | None) -> list[str]:
    return [w["code"] for w in warnings or []]


def _reference_mean_rmse() -> float:
    """RMSE in hours of predicting the training part's mean on the test part (the first
    200 reference rows), as the band's baseline is computed."""
    hours = [r[4] for r in REFERENCE_ROWS]
    test, pool = hours[:200], hours[200:]
    centre = sum(pool) / len(pool)
    return math.sqrt(sum((h - centre) ** 2 for h in test) / len(test))


def test_a_regression_fit_at_small_epsilon_is_warned_worse_than_the_mean(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, NUMERIC)
    reference_id = _public_reference(client, site, NUMERIC)
    body = {
        "mechanism": "output_perturbation",
        "loss": "huber",
        "epsilon": 0.01,
        "regularization": 0.01,
    }
    quote, job, model = _quote_job_model(client, site, dataset["id"], body)
    band = quote["expected_accuracy"]
    assert band["metric"] == "rmse"
    assert band["reference_dataset_id"] == reference_id
    assert band["mean_baseline_rmse"] == pytest.approx(_reference_mean_rmse(), rel=1e-9)
    assert band["mean"] > band["mean_baseline_rmse"]
    assert 0.0 <= band["p10"] <= band["p90"] <= UPPER - LOWER
    assert _codes(quote["warnings"]) == ["worse_than_mean_baseline"]
    assert _codes(job["warnings"]) == ["worse_than_mean_baseline"]
    assert model["privacy"]["expected_accuracy"] == band
    assert _codes(model["privacy"]["warnings"]) == ["worse_than_mean_baseline"]


def test_a_well_powered_regression_fit_is_not_warned(client: TestClient, site: SiteHandle) -> None:
    dataset = uploaded(client, site, NUMERIC, data=csv_bytes(make_rows(4000, seed=5)))
    _public_reference(client, site, NUMERIC)
    body = {"mechanism": "adassp", "epsilon": 1.0, "delta": 1e-6, "regularization": "auto"}
    quote = _fit(client, site, dataset["id"], body, dry_run=True)
    assert quote.status_code == 200, quote.text
    band = quote.json()["expected_accuracy"]
    assert band["mean"] < band["mean_baseline_rmse"]
    assert quote.json()["warnings"] == []


def test_a_multiclass_dp_sgd_fit_at_small_epsilon_is_below_the_majority_class(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, MULTICLASS)
    _public_reference(client, site, MULTICLASS, SKEWED_ROWS)
    body = {"mechanism": "dp_sgd", "epsilon": 0.05, "delta": 1e-6, "regularization": 0.01}
    quote, job, model = _quote_job_model(client, site, dataset["id"], body)
    band = quote["expected_accuracy"]
    test = len(SKEWED_ROWS) // 2  # the reference's first half is the test sample
    grades = [r[3] for r in SKEWED_ROWS[:test]]
    assert band["majority_baseline"] == max(grades.count(c) for c in CLASSES) / test
    assert band["majority_baseline"] > 0.45
    assert band["mean"] < band["majority_baseline"]
    assert _codes(quote["warnings"]) == _codes(job["warnings"]) == ["below_majority_baseline"]
    assert _codes(model["privacy"]["warnings"]) == ["below_majority_baseline"]


def test_without_a_public_reference_there_is_no_band(client: TestClient, site: SiteHandle) -> None:
    # (with a given λ: λ "auto" or mechanism auto estimate the baseline privately instead,
    # tests/api/test_task_private_baseline.py)
    dataset = uploaded(client, site, NUMERIC)
    body = {
        "mechanism": "output_perturbation",
        "loss": "huber",
        "epsilon": 0.01,
        "regularization": 0.01,
    }
    quote = _fit(client, site, dataset["id"], body, dry_run=True)
    assert quote.status_code == 200, quote.text
    assert quote.json()["expected_accuracy"] is None
    assert quote.json()["warnings"] == []


def test_an_auto_fit_on_a_numeric_label_carries_the_band_of_its_choice(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, NUMERIC)
    reference_id = _public_reference(client, site, NUMERIC)
    body = {"mechanism": "auto", "epsilon": 1.0, "delta": 1e-6}
    quote = _fit(client, site, dataset["id"], body, dry_run=True)
    assert quote.status_code == 200, quote.text
    out = quote.json()
    assert out["auto"]["chosen"]["mechanism"] == out["mechanism"] == "adassp"
    assert out["expected_accuracy"]["metric"] == "rmse"
    assert out["expected_accuracy"]["reference_dataset_id"] == reference_id


def test_a_public_dataset_with_another_label_is_no_reference(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, MULTICLASS)
    _public_reference(client, site, NUMERIC)  # same features, a numeric label
    _public_reference(client, site, {**MULTICLASS, "classes": list(reversed(CLASSES))})
    body = {"mechanism": "dp_sgd", "epsilon": 0.05, "delta": 1e-6, "regularization": 0.01}
    quote = _fit(client, site, dataset["id"], body, dry_run=True)
    assert quote.status_code == 200, quote.text
    assert quote.json()["expected_accuracy"] is None
    assert quote.json()["warnings"] == []
