"""The private trivial-model baseline of multi-class and numeric labels without a public
reference (issue 29; service/dp/analysis/baseline_tasks.py), on SQLite and PostgreSQL.

A ``"mechanism": "auto"`` fit without a public reference spends the public slice ρ·ε on a
noisy class histogram or noisy label sums and the rest on the fit: the ledger is charged
exactly the request's ε, the quote and the job show the slice, and the model's record the
release, the band against it and any warning. A named mechanism spends no slice, whether its
λ is given or automatic (as for binary fits); a bad request is a 422 that charges nothing.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.dp.analysis import baseline_tasks as bt
from tests.api.test_label_tasks import (
    CLASSES,
    LOWER,
    MULTICLASS,
    NUMERIC,
    UPPER,
    _fit,
    csv_bytes,
    make_rows,
    uploaded,
)
from tests.api.test_task_warnings import _public_reference
from tests.conftest import SiteHandle
from tests.unit.jobs._flow import budget

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

N = 90  # rows of the default upload (tests/api/test_label_tasks.py)
#: A label with no signal: grades and hours drawn independently of the features.
_rng = np.random.default_rng(29)
WEAK_ROWS = [
    (p, age, color, CLASSES[int(_rng.integers(0, 3))], round(float(_rng.uniform(0, 40)), 3))
    for p, age, color, _, _ in make_rows(N, seed=7)
]
BIG_BUDGET = {"epsilon": 10.0, "delta": 1e-6}  # the test server's maximum


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def _run(
    client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(quote, job, the model's privacy record)."""
    quote = _fit(client, site, dataset_id, body, dry_run=True)
    assert quote.status_code == 200, quote.text
    response = _fit(client, site, dataset_id, body)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    return quote.json(), job, model["privacy"]


def _codes(warnings: list[dict[str, Any]] | None) -> list[str]:
    return [w["code"] for w in warnings or []]


def test_auto_multiclass_without_a_reference_pays_a_noisy_histogram_within_the_request(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, MULTICLASS)
    # n = 90, ε = 1: the share 2√2/(90·1·0.01) = 3.1 is capped at 5 %: the histogram gets
    # ε_b = 0.05 (noise scale 2/0.05 = 40 per class), the fit 0.95
    quote, job, record = _run(client, site, dataset["id"], {"mechanism": "auto", "epsilon": 1.0})

    plan = quote["expected_accuracy"]["private_baseline"]
    assert plan["mechanism"] == "discrete_laplace_histogram"
    assert plan["epsilon"] == pytest.approx(0.05, rel=1e-12)
    assert plan["fit_epsilon"] == pytest.approx(0.95, rel=1e-12)
    assert plan["fit_epsilon"] + plan["epsilon"] <= 1.0
    assert quote["cost"]["epsilon"] == 1.0
    assert quote["calibration"]["epsilon"] == pytest.approx(0.95, rel=1e-12)
    band = quote["expected_accuracy"]
    assert band["baseline_source"] == "private_count"
    assert band["reference"] == "synthetic"
    assert band["majority_baseline"] is None  # not released before the run
    assert quote["warnings"] == []

    assert job["charges"][0]["epsilon"] == 1.0  # the fit's 0.95 and the histogram's 0.05
    assert job["params"]["epsilon"] == pytest.approx(0.95, rel=1e-12)
    assert job["params"]["private_baseline"] == plan
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == 1.0

    assert record["epsilon"] == pytest.approx(0.95, rel=1e-12)  # the model's own release
    released = record["private_baseline"]
    assert released["epsilon"] == pytest.approx(0.05, rel=1e-12)
    assert released["scale"] == pytest.approx(40.0)
    assert released["sensitivity"] == 2
    counts = released["noisy_class_counts"]
    assert len(counts) == len(CLASSES)
    assert all(isinstance(c, int) for c in counts)
    assert released["majority_baseline"] == pytest.approx(
        min(1.0, max(1 / 3, max(counts) / N)), rel=1e-12
    )
    assert "composition" in released
    expected = record["expected_accuracy"]
    assert expected["baseline_source"] == "private_count"
    assert expected["majority_baseline"] == released["majority_baseline"]
    # by hand: the discrete Laplace law ∝ q^|k|, q = e^{−1/40}, has variance 2q/(1 − q)²
    q = math.exp(-1.0 / 40.0)
    sd = math.sqrt(2 * q / (1 - q) ** 2) / N
    assert math.sqrt(bt.discrete_laplace_variance(40.0)) / N == pytest.approx(sd, rel=1e-12)
    assert expected["baseline_sd"] == pytest.approx(sd, rel=1e-9)
    assert expected["warning_threshold"] == pytest.approx(
        released["majority_baseline"] + 1.645 * sd, rel=1e-9
    )


def test_auto_regression_without_a_reference_pays_noisy_label_sums_within_the_request(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, NUMERIC)
    # n = 90, ε = 1: √136/(90·0.01) is capped at 5 %: Σy and Σy² get 0.025 each
    body = {"mechanism": "auto", "epsilon": 1.0, "delta": 0.0}
    quote, job, record = _run(client, site, dataset["id"], body)

    plan = quote["expected_accuracy"]["private_baseline"]
    assert plan["mechanism"] == "discrete_laplace_grid_sums"
    assert plan["epsilon"] == pytest.approx(0.05, rel=1e-12)
    assert quote["expected_accuracy"]["metric"] == "rmse"
    assert quote["expected_accuracy"]["baseline_source"] == "private_sums"
    assert quote["expected_accuracy"]["mean_baseline_rmse"] is None
    assert quote["cost"]["epsilon"] == 1.0
    assert job["charges"][0]["epsilon"] == 1.0
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == 1.0

    released = record["private_baseline"]
    assert released["epsilon_per_sum"] == pytest.approx(0.025, rel=1e-12)
    assert released["scale"] == {
        "labels": pytest.approx(80.0),
        "squared_labels": pytest.approx(40.0),
    }
    spread = bt.PrivateSpread(
        released["noisy_label_sum"],
        released["noisy_squared_label_sum"],
        N,
        released["epsilon"],
        (UPPER - LOWER) / 2,
    )
    assert released["mean_baseline_rmse"] == pytest.approx(spread.rmse, rel=1e-12)
    expected = record["expected_accuracy"]
    assert expected["metric"] == "rmse"
    assert expected["mean_baseline_rmse"] == released["mean_baseline_rmse"]
    assert expected["baseline_sd"] == pytest.approx(spread.sd, rel=1e-12)
    assert 0.0 <= expected["p10"] <= expected["p90"] <= UPPER - LOWER
    for key in ("noisy_label_sum", "noisy_squared_label_sum"):
        assert key not in json.dumps(released["guarantee"])


@pytest.mark.parametrize(
    ("label", "code"),
    [(MULTICLASS, "below_majority_baseline"), (NUMERIC, "worse_than_mean_baseline")],
)
def test_a_tiny_epsilon_on_a_weak_signal_is_warned_in_the_record(
    client: TestClient, site: SiteHandle, label: dict[str, Any], code: str
) -> None:
    dataset = uploaded(client, site, label, data=csv_bytes(WEAK_ROWS))
    # ε = 0.01 on 90 rows, mechanism auto: the release
    # gets ε_b = 0.0005, so the baseline's sd is far above its range and the bound
    # (m̂ + 1.645·sd > 1, or max(0, σ̂ − 1.645·sd) = 0) flags every band
    body: dict[str, Any] = {"mechanism": "auto", "epsilon": 0.01}
    quote, job, record = _run(client, site, dataset["id"], body)
    assert quote["expected_accuracy"]["private_baseline"]["epsilon"] == pytest.approx(5e-4)
    assert job["warnings"] == []  # at submission nothing is released yet
    assert job["charges"][0]["epsilon"] == 0.01
    assert _codes(record["warnings"]) == [code]
    assert "estimated privately" in record["warnings"][0]["message"]
    threshold = record["expected_accuracy"]["warning_threshold"]
    assert threshold > 1.0 if label is MULTICLASS else threshold == 0.0


@pytest.mark.parametrize("label", [MULTICLASS, NUMERIC])
def test_a_large_epsilon_on_a_strong_signal_is_not_warned(
    client: TestClient, site: SiteHandle, label: dict[str, Any]
) -> None:
    rows = make_rows(2000, seed=5)
    dataset = uploaded(client, site, label, data=csv_bytes(rows), budget=BIG_BUDGET)
    # n = 2000, ε = 10: the share is 2√2/(2000·10·0.01) = 1.4 % (multi-class) or 5 %
    # (regression), the baseline's sd small
    quote, job, record = _run(
        client, site, dataset["id"], {"mechanism": "auto", "epsilon": 10.0, "delta": 0.0}
    )
    share = bt.baseline_share(dataset["task"], 2000, 10.0)
    assert quote["expected_accuracy"]["private_baseline"]["share"] == share
    assert share == (2 * math.sqrt(2) / 200 if label is MULTICLASS else 0.05)
    assert job["charges"][0]["epsilon"] == 10.0
    expected = record["expected_accuracy"]
    if label is MULTICLASS:
        assert expected["mean"] > expected["warning_threshold"] > expected["majority_baseline"]
    else:
        assert expected["mean"] < expected["warning_threshold"] < expected["mean_baseline_rmse"]
    assert record["warnings"] == []


@pytest.mark.parametrize("regularization", [0.01, "auto", None])
def test_a_named_mechanism_pays_no_slice(
    client: TestClient, site: SiteHandle, regularization: float | str | None
) -> None:
    dataset = uploaded(client, site, MULTICLASS)
    body: dict[str, Any] = {"mechanism": "objective_perturbation", "epsilon": 1.0}
    if regularization is not None:
        body["regularization"] = regularization
    quote, job, record = _run(client, site, dataset["id"], body)
    assert quote["expected_accuracy"] is None
    assert quote["calibration"]["epsilon"] == 1.0
    assert "private_baseline" not in job["params"]
    assert "private_baseline" not in record or record["private_baseline"] is None
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == 1.0


def test_with_a_public_reference_no_slice_is_spent(client: TestClient, site: SiteHandle) -> None:
    dataset = uploaded(client, site, NUMERIC)
    reference_id = _public_reference(client, site, NUMERIC)
    quote = _fit(client, site, dataset["id"], {"mechanism": "auto", "epsilon": 1.0}, dry_run=True)
    assert quote.status_code == 200, quote.text
    out = quote.json()
    assert out["expected_accuracy"]["reference_dataset_id"] == reference_id
    assert "private_baseline" not in out["expected_accuracy"]
    assert out["cost"]["epsilon"] == out["calibration"]["epsilon"] == 1.0


@pytest.mark.parametrize(
    ("label", "fields"),
    [
        (MULTICLASS, {"params": {"epochs": 3}}),
        (MULTICLASS, {"epsilon": None}),
        (MULTICLASS, {"regularization": -1.0}),
        (NUMERIC, {"loss": "logistic"}),
        (NUMERIC, {"mechanism": "dp_sgd", "regularization": "auto"}),
    ],
)
@pytest.mark.parametrize("dry", [True, False])
def test_a_bad_auto_request_is_a_422_that_charges_nothing(
    client: TestClient, site: SiteHandle, label: dict[str, Any], fields: dict[str, Any], dry: bool
) -> None:
    dataset = uploaded(client, site, label)
    body = {"mechanism": "auto", "epsilon": 1.0, **fields}
    response = _fit(client, site, dataset["id"], body, dry_run=dry)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    state = budget(client, site.headers, dataset["id"])
    assert state["epsilon_spent"] == 0.0
    assert state["charges"] == []
    assert client.get("/v1/jobs", headers=site.headers).json()["total"] == 0
