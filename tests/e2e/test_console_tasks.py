"""The console shows what a multi-class or numeric label holds (issue 29), in headless
Chromium as tests/e2e/test_console.py:

* a multi-class dataset and model: the task, the declared classes in their public order
  (with the index each has in the model's rows), and the model's weights as a table with a
  row per design column and a column per class, equal to the model's ``coef`` (K × d);
* a regression dataset and model: the task, the public bounds, the rows clipped at upload,
  and the weights both as fitted (mapped [−1, 1] units) and in the label's units
  β = w·(U − L)/2, with the mapping stated; the stated mapping is checked against the API's
  own predictions (value = clip((L + U)/2 + (U − L)/2 · score, L, U)).

* a private evaluation of each: the multi-class one as its K × K confusion matrix (rows the
  true class, columns the predicted one, both in the declared order) with per-class
  precision, recall and F1 and their intervals, the regression one as RMSE, MAE and R² with
  their intervals, each equal to the API's numbers.

Each fit is a private one (multi-class objective perturbation, AdaSSP) on a small synthetic
table whose label follows the age, so the page shows real fitted weights and real releases.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx2
import numpy as np
import pytest

from tests.support.browser import watched_page
from tests.support.live_server import LiveServer

pytestmark = pytest.mark.slow

CLASSES = ["low", "mid", "high"]  # not alphabetical: the page keeps the declared order
LOWER, UPPER = 0.0, 40.0
#: the regression label: weekly hours clipped to [LOWER, UPPER]
HOURS_LABEL: dict[str, Any] = {"column": "hours", "lower": LOWER, "upper": UPPER}
FEATURES: list[dict[str, Any]] = [
    {"column": "age", "type": "numeric", "lower": 18, "upper": 90},
    {"column": "color", "type": "categorical", "categories": ["red", "green", "blue"]},
]
N_ROWS = 300


def _csv(clip_rows: int = 0) -> bytes:
    """patient,age,color,grade,hours; the last ``clip_rows`` hours lie outside [0, 40]."""
    rng = np.random.default_rng(29)
    lines = ["patient,age,color,grade,hours"]
    for i in range(N_ROWS):
        age = int(rng.integers(18, 91))
        grade = CLASSES[min(2, (age - 18) * 3 // 73)]
        hours = round(float(np.clip((age - 18) / 2 + rng.normal(0, 2), 0, 36)), 3)
        if i >= N_ROWS - clip_rows:
            hours = -5.0 if i % 2 else 47.5
        lines.append(f"p{i},{age},{('red', 'green', 'blue')[i % 3]},{grade},{hours}")
    return ("\n".join(lines) + "\n").encode()


def _post(server: LiveServer, path: str, headers: dict[str, str], **kwargs: Any) -> Any:
    response = httpx2.post(f"{server.base_url}{path}", headers=headers, timeout=120, **kwargs)
    assert response.status_code in (200, 201), response.text
    return response.json()


def _get(server: LiveServer, path: str, headers: dict[str, str]) -> Any:
    response = httpx2.get(f"{server.base_url}{path}", headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def _site_with_model(
    server: LiveServer, label: dict[str, Any], fit: dict[str, Any], clip_rows: int = 0
) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, str]]:
    """A new site, its dataset with ``label`` and a model fitted with ``fit``."""
    name = f"Tasks {uuid.uuid4().hex}"  # the server is shared: site names must be new
    created = _post(server, "/v1/sites", server.admin_headers, json={"name": name})
    key = created["key"]["api_key"]
    site = {"Authorization": f"Bearer {key}"}
    spec = {
        "name": "grades",
        "label": label,
        "features": FEATURES,
        "budget": {"epsilon": 2.0, "delta": 1e-6},
    }
    dataset = _post(
        server,
        "/v1/datasets",
        site,
        files={
            "file": ("tasks.csv", _csv(clip_rows), "text/csv"),
            "spec": (None, json.dumps(spec)),
        },
    )
    job = _post(
        server,
        f"/v1/datasets/{dataset['id']}/fits",
        {**site, "Prefer": "wait=60"},
        json={"epsilon": 1.0, "delta": 1e-6, "regularization": 0.05, **fit},
    )
    assert job["status"] == "succeeded", job
    model = _get(server, f"/v1/models/{job['model_id']}", site)
    return key, dataset, model, site


def _evaluate(
    server: LiveServer, site: dict[str, str], model: dict[str, Any], dataset: dict[str, Any]
) -> dict[str, Any]:
    """A private evaluation of ``model`` on its own dataset at ε = 0.5 (the result as stored)."""
    response = httpx2.post(
        f"{server.base_url}/v1/models/{model['id']}/evaluations",
        headers={**site, "Prefer": "wait=60"},
        json={"dataset_id": dataset["id"], "epsilon": 0.5},
        timeout=120,
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    evaluation: dict[str, Any] = _get(server, f"/v1/evaluations/{job['id']}", site)
    return evaluation


def _interval(text: str) -> tuple[float, float, float]:
    """'0.61 [0.55, 0.67]' → (0.61, 0.55, 0.67); an unbounded end reads ±∞."""
    head, _, rest = text.partition(" [")
    low, high = rest.rstrip("]").split(", ")
    ends = {"−∞": float("-inf"), "∞": float("inf")}
    return float(head), ends.get(low) or float(low), ends.get(high) or float(high)


def _approx(metric: dict[str, Any]) -> tuple[Any, Any, Any]:
    low, high = metric["interval"]
    return (
        pytest.approx(metric["estimate"], rel=1e-3, abs=1e-12),
        float("-inf") if low is None else pytest.approx(low, rel=1e-3, abs=1e-12),
        float("inf") if high is None else pytest.approx(high, rel=1e-3, abs=1e-12),
    )


def _open(server: LiveServer, browser: Any, key: str) -> tuple[Any, Any]:
    page, record = watched_page(browser, server.base_url)
    page.goto(f"{server.base_url}/console")
    page.fill("#key", key)
    page.click("#login button[type=submit]")
    page.locator(".model-id").first.wait_for(timeout=30_000)
    return page, record


def _cells(row: Any) -> list[str]:
    return [c.strip() for c in row.locator("td").all_inner_texts()]


def test_the_console_shows_a_multiclass_dataset_and_its_per_class_weights(
    shared_live_server: LiveServer, browser: Any
) -> None:
    key, dataset, model, _ = _site_with_model(
        shared_live_server,
        {"column": "grade", "classes": CLASSES},
        {"mechanism": "objective_perturbation"},
    )
    assert model["task"] == "multiclass"
    coef = model["model"]["coef"]
    names = model["feature_names"]
    assert (len(coef), len(coef[0])) == (len(CLASSES), len(names))

    page, record = _open(shared_live_server, browser, key)
    card = page.locator(f".dataset[data-id='{dataset['id']}']")
    info = card.locator(".label-info")
    assert info.get_attribute("data-task") == "multi-class"
    assert info.locator(".task").inner_text() == "multi-class"
    assert info.locator(".label-column").inner_text() == "grade"
    assert "3 classes in order" in info.inner_text()
    assert info.locator(".label-class").all_inner_texts() == ["0 low", "1 mid", "2 high"]

    row = page.locator("#models tbody tr").first
    assert row.locator(".label-info .label-class .value").all_inner_texts() == CLASSES
    weights = row.locator("details.multiclass-weights")
    summary = weights.locator("summary").inner_text()
    assert summary == f"3 × {len(names)} weights (a column per class)"
    weights.locator("summary").click()
    headings = weights.locator("thead th").all_inner_texts()
    assert headings == ["Feature", *CLASSES]
    body_rows = weights.locator("tbody tr").all()
    assert len(body_rows) == len(names)
    for j, tr in enumerate(body_rows):
        cells = _cells(tr)
        assert cells[0] == names[j]
        shown = [float(c) for c in cells[1:]]
        assert shown == pytest.approx([coef[k][j] for k in range(3)], rel=1e-3, abs=1e-12)
    assert record.foreign_requests == []
    assert record.page_errors == []
    assert record.console_errors == []


# The multi-class page above is the default tier's smoke of these pages; this one runs in
# `make test-heavy` (issue 27 §5).
@pytest.mark.heavy
def test_the_console_shows_a_regression_dataset_and_its_weights_in_label_units(
    shared_live_server: LiveServer, browser: Any
) -> None:
    key, dataset, model, site = _site_with_model(
        shared_live_server,
        HOURS_LABEL,
        {"mechanism": "adassp"},
        clip_rows=4,
    )
    assert model["task"] == "regression"
    assert dataset["ingest"]["label_clipped_rows"] == 4
    weights_w = [c["weight"] for c in model["coefficients"]]
    half = (UPPER - LOWER) / 2

    page, record = _open(shared_live_server, browser, key)
    card = page.locator(f".dataset[data-id='{dataset['id']}']")
    info = card.locator(".label-info")
    assert info.locator(".task").inner_text() == "regression"
    assert info.locator(".label-column").inner_text() == "hours"
    assert info.locator(".label-bounds").inner_text() == "[0, 40]"
    assert info.locator(".label-clipped").inner_text() == "4"
    assert "4 rows clipped to the bounds at upload" in info.inner_text()

    row = page.locator("#models tbody tr").first
    assert row.locator(".label-info .label-bounds").inner_text() == "[0, 40]"
    weights = row.locator("details.regression-weights")
    weights.locator("summary").click()
    mapping = weights.locator(".weights-mapping").inner_text()
    assert "value = clip(20 + Σ βⱼ·xⱼ, 0, 40)" in mapping
    assert "βⱼ = wⱼ·(40 − 0)/2" in mapping
    body_rows = weights.locator("tbody tr").all()
    assert len(body_rows) == len(weights_w)
    for tr, c, w in zip(body_rows, model["coefficients"], weights_w, strict=True):
        cells = _cells(tr)
        assert cells[0] == c["feature"]
        assert float(cells[1]) == pytest.approx(w, rel=1e-3, abs=1e-12)
        assert float(cells[2]) == pytest.approx(w * half, rel=1e-3, abs=1e-12)

    # the stated mapping is the one the API predicts with
    rows = [{"age": a, "color": c} for a, c in [(18, "red"), (50, "green"), (90, "blue")]]
    predictions = _post(
        shared_live_server, f"/v1/models/{model['id']}/predict", site, json={"rows": rows}
    )["predictions"]
    for p in predictions:
        expected = min(max((LOWER + UPPER) / 2 + half * p["score"], LOWER), UPPER)
        assert p["value"] == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert record.foreign_requests == []
    assert record.page_errors == []
    assert record.console_errors == []


# The multi-class page above is the default tier's smoke of these pages; this one runs in
# `make test-heavy` (issue 27 §5).
@pytest.mark.heavy
def test_the_console_shows_a_multiclass_evaluations_confusion_matrix_and_per_class_metrics(
    shared_live_server: LiveServer, browser: Any
) -> None:
    key, dataset, model, site = _site_with_model(
        shared_live_server,
        {"column": "grade", "classes": CLASSES},
        {"mechanism": "objective_perturbation"},
    )
    evaluation = _evaluate(shared_live_server, site, model, dataset)
    result = evaluation["result"]
    assert result["classes"] == CLASSES

    page, record = _open(shared_live_server, browser, key)
    page.locator(".evaluation-id").first.wait_for(timeout=30_000)
    row = page.locator("#evaluations tr.evaluation").first
    below = page.locator("#evaluations tr.evaluation-details-row").first
    assert row.locator(".evaluation-task").inner_text() == "multi-class"
    accuracy = _interval(row.locator(".evaluation-accuracy").inner_text())
    assert accuracy == _approx(result["metrics"]["accuracy"])
    assert row.locator(".evaluation-f1").inner_text().endswith("(macro)")
    assert below.get_attribute("data-id") == evaluation["id"]
    details = below.locator("details.multiclass-evaluation")
    assert details.get_attribute("open") is not None  # shown without a click
    matrix = details.locator("table.confusion-matrix")
    assert matrix.locator("th.cm-predicted").all_inner_texts() == CLASSES
    assert matrix.locator("th.cm-true").all_inner_texts() == CLASSES
    counts = [
        [int(c) for c in tr.locator("td.cm-count").all_inner_texts()]
        for tr in matrix.locator("tbody tr").all()
    ]
    assert counts == result["confusion_matrix"]["counts"]
    assert matrix.locator("td.cm-diagonal").count() == len(CLASSES)
    per_class = details.locator("table.per-class tbody tr").all()
    assert len(per_class) == len(CLASSES)
    for tr, expected in zip(per_class, result["per_class"], strict=True):
        cells = _cells(tr)
        assert cells[0] == expected["class"]
        for cell, name in zip(cells[1:], ("precision", "recall", "f1"), strict=True):
            assert _interval(cell) == _approx(expected[name]), name
    assert record.page_errors == []
    assert record.console_errors == []


# The multi-class page above is the default tier's smoke of these pages; this one runs in
# `make test-heavy` (issue 27 §5).
@pytest.mark.heavy
def test_the_console_shows_a_regression_evaluations_errors_with_intervals(
    shared_live_server: LiveServer, browser: Any
) -> None:
    key, dataset, model, site = _site_with_model(
        shared_live_server,
        HOURS_LABEL,
        {"mechanism": "adassp"},
    )
    result = _evaluate(shared_live_server, site, model, dataset)["result"]

    page, record = _open(shared_live_server, browser, key)
    page.locator(".evaluation-id").first.wait_for(timeout=30_000)
    row = page.locator("#evaluations tr.evaluation").first
    below = page.locator("#evaluations tr.evaluation-details-row").first
    assert row.locator(".evaluation-task").inner_text() == "regression"
    assert row.locator(".evaluation-accuracy").inner_text() == "—"
    table = below.locator("table.regression-metrics")
    shown = {_cells(tr)[0]: _cells(tr) for tr in table.locator("tbody tr").all()}
    assert list(shown) == ["RMSE", "MAE", "R²"]
    for label, name in (("RMSE", "rmse"), ("MAE", "mae"), ("R²", "r2")):
        assert _interval(shown[label][1]) == _approx(result["metrics"][name]), name
    assert shown["RMSE"][2] == "label units"
    assert "label bounds [0, 40]" in below.locator(".evaluation-note").inner_text()
    assert record.page_errors == []
    assert record.console_errors == []
