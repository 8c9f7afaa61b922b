"""Uploaded multi-class and regression models export to files that predict what PrivFit
predicts (issue 29).

A site uploads a multi-class model (K rows of weights) and a regression model (weights in the
label's [−1, 1] units, large enough that some rows reach both clipped ends) through
``POST /v1/models``. Each is exported as PrivFit's JSON document, a skops archive and ONNX;
every file is loaded in a fresh Python process that imports no PrivFit code (the runners of
tests/e2e/test_task_exports.py) and compared with the API's predictions on the same rows:
classes, scores to 1e-9 and probabilities to 1e-12 in float64 (float32 precision for ONNX);
values to 1e-9 (float32 precision for ONNX), never outside the label's bounds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.api.test_label_tasks import CLASSES, FEATURES, LOWER, MULTICLASS, NUMERIC, UPPER
from tests.conftest import SiteHandle
from tests.e2e.test_task_exports import (
    _JSON_RUNNER,
    _ONNX_RUNNER,
    _SKOPS_RUNNER,
    PREDICT_ROWS,
    _api,
    _export,
    _readme_conversion,
    _run_fresh,
)

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

MATRIX = [
    [1.5, 0.25, -0.5, 0.0, -0.75],
    [0.0, -0.25, 0.5, 0.125, 0.5],
    [-1.25, 0.0, 0.0, 0.5, 0.25],
]
VECTOR = [6.0, 0.5, -0.25, 0.0, -3.0]


def _upload(client: TestClient, site: SiteHandle, label: dict[str, Any], weights: Any) -> str:
    response = client.post(
        "/v1/models",
        json={
            "label": label,
            "features": FEATURES,
            "weights": weights,
            "privacy_claim": {"epsilon": 1.0, "delta": 1e-6, "mechanism": "in-house"},
        },
        headers=site.headers,
    )
    assert response.status_code == 201, response.text
    model_id: str = response.json()["id"]
    return model_id


@pytest.mark.parametrize("fmt", ["json", "skops", "onnx"])
def test_uploaded_models_export_to_files_that_predict_what_privfit_predicts(
    client: TestClient, site: SiteHandle, fmt: str, tmp_path: Path
) -> None:
    models = {
        "multiclass": _upload(client, site, MULTICLASS, MATRIX),
        "regression": _upload(client, site, NUMERIC, VECTOR),
    }
    rows_path = tmp_path / "rows.json"
    rows_path.write_text(json.dumps(PREDICT_ROWS))
    files = [(_export(client, site, models[name], fmt, tmp_path), rows_path) for name in models]
    runner = {
        "json": _readme_conversion() + _JSON_RUNNER,
        "skops": _SKOPS_RUNNER,
        "onnx": _ONNX_RUNNER,
    }[fmt]
    outputs = dict(zip(models, _run_fresh(runner, files, tmp_path), strict=True))

    api, out = _api(client, site, models["multiclass"]), outputs["multiclass"]
    predicted = [p["predicted_class"] for p in api]
    assert set(predicted) == set(CLASSES)  # every class is predicted on some row
    probabilities = np.array([p["probabilities"] for p in api])
    if fmt == "onnx":
        np.testing.assert_allclose(out["probabilities"], probabilities, rtol=0, atol=2e-6)
        top = np.sort(np.array([p["scores"] for p in api]), axis=1)
        clear = top[:, -1] - top[:, -2] > 1e-5
        assert clear.sum() >= len(api) - 3
        assert [c for c, ok in zip(out["labels"], clear, strict=True) if ok] == [
            c for c, ok in zip(predicted, clear, strict=True) if ok
        ]
    else:
        scores = np.array([p["scores"] for p in api])
        np.testing.assert_allclose(out["scores"], scores, rtol=0, atol=1e-9)
        np.testing.assert_allclose(out["probabilities"], probabilities, rtol=0, atol=1e-12)
        assert out["labels"] == predicted

    api = _api(client, site, models["regression"])
    values = np.array([p["value"] for p in api])
    assert values.min() == LOWER  # the weights reach both clipped ends
    assert values.max() == UPPER
    got = np.array(outputs["regression"]["values"])
    assert got.min() >= LOWER
    assert got.max() <= UPPER
    tolerance = 1e-9 if fmt != "onnx" else 2e-6 * (UPPER - LOWER)  # ONNX: float32
    np.testing.assert_allclose(got, values, rtol=0, atol=tolerance)
    if fmt != "json":
        metadata = outputs["regression"]["metadata"]
        assert metadata["privfit.task"] == "regression"
        assert json.loads(metadata["privfit.privacy"])["verified"] is False
