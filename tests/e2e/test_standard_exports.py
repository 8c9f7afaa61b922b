"""Standard exports on UCI Adult (issue 17 item 3): skops and ONNX predict what PrivFit predicts.

A site uploads the Adult training split, fits objective perturbation at ε = 1, scores the test
split's complete rows through ``POST /v1/models/{id}/predict``, and downloads the model as
``format=json|skops|onnx``. A fresh Python process (no PrivFit server code imported) loads the
skops archive with :func:`privfit_client.sklearn.load_skops` and the ONNX model with
onnxruntime and scores the same rows: labels must be equal and scores within 1e-6, and each
file must carry the model's privacy record.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from benchmarks.adult import csv_bytes, load_spec
from service.api.schemas.models import MAX_PREDICT_ROWS
from service.settings import Settings
from tests.conftest import SiteHandle
from tests.e2e.test_adult_flow import complete_test_rows

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

FIT = {
    "mechanism": "objective_perturbation",
    "epsilon": 1.0,
    "delta": 0.0,
    "loss": "logistic",
    "regularization": 1e-3,
}

# Runs in a fresh interpreter: only numpy, pandas, privfit_client.sklearn and onnxruntime.
LOADER = r"""
import json, sys
import numpy as np, pandas as pd, onnxruntime
from privfit_client.sklearn import load_skops, skops_privacy

skops_path, onnx_path, rows_path, out_path = sys.argv[1:]
rows = json.loads(open(rows_path).read())
frame = pd.DataFrame(rows)
pipeline = load_skops(skops_path)
session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
meta = session.get_modelmeta().custom_metadata_map
feeds = {}
for given, name in zip(session.get_inputs(), json.loads(meta["privfit.columns"])):
    column = frame[[name]].to_numpy()
    feeds[given.name] = (
        column.astype(str).astype(object) if given.type == "tensor(string)"
        else column.astype(np.float64)
    )
labels, scores = session.run(["label", "scores"], feeds)
json.dump({
    "skops_labels": pipeline.predict(frame).tolist(),
    "skops_scores": pipeline.decision_function(frame).tolist(),
    "skops_record": skops_privacy(skops_path),
    "onnx_labels": labels.ravel().tolist(),
    "onnx_scores": scores[:, 1].tolist(),
    "onnx_privacy": json.loads(meta["privfit.privacy"]),
    "onnx_model_id": meta["privfit.model_id"],
    "modules": sorted(m for m in sys.modules if m.split(".")[0] == "service"),
}, open(out_path, "w"))
"""


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Room for Adult's 3.5 MB upload."""
    return settings.model_copy(update={"max_request_bytes": 64 * 1024 * 1024})


def test_skops_and_onnx_exports_predict_what_privfit_predicts_on_adult(
    client: TestClient, site: SiteHandle, tmp_path: Path
) -> None:
    response = client.post(
        "/v1/datasets",
        files={
            "file": ("adult.csv", csv_bytes("train"), "text/csv"),
            "spec": (None, json.dumps(load_spec())),
        },
        headers=site.headers,
    )
    assert response.status_code == 201, response.text
    dataset = response.json()
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits",
        json=FIT,
        headers={**site.headers, "Prefer": "wait=120"},
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()

    rows, _ = complete_test_rows()
    predictions: list[dict[str, Any]] = []
    for start in range(0, len(rows), MAX_PREDICT_ROWS):
        response = client.post(
            f"/v1/models/{model['id']}/predict",
            json={"rows": rows[start : start + MAX_PREDICT_ROWS]},
            headers=site.headers,
        )
        assert response.status_code == 200, response.text
        predictions.extend(response.json()["predictions"])
    api_scores = np.array([p["score"] for p in predictions])
    api_labels = np.where([p["positive"] for p in predictions], 1, -1)
    assert len(set(api_labels.tolist())) == 2  # both classes occur: the comparison is not vacuous

    paths: dict[str, Path] = {}
    for fmt in ("json", "skops", "onnx"):
        response = client.get(
            f"/v1/models/{model['id']}/export", params={"format": fmt}, headers=site.headers
        )
        assert response.status_code == 200, response.text
        assert f"privfit-model-{model['id']}.{fmt}" in response.headers["content-disposition"]
        paths[fmt] = tmp_path / f"model.{fmt}"
        paths[fmt].write_bytes(response.content)
    document = json.loads(paths["json"].read_text())
    assert document["model_id"] == model["id"]
    assert {k: v for k, v in model["privacy"].items() if k != "claim"} == document["privacy"]

    rows_path, out_path = tmp_path / "rows.json", tmp_path / "out.json"
    rows_path.write_text(json.dumps(rows))
    subprocess.run(
        [
            sys.executable,
            "-c",
            LOADER,
            str(paths["skops"]),
            str(paths["onnx"]),
            str(rows_path),
            str(out_path),
        ],
        check=True,
        timeout=300,
    )
    out = json.loads(out_path.read_text())
    assert out["modules"] == []  # the loader did not need PrivFit's server code
    for fmt in ("skops", "onnx"):
        np.testing.assert_array_equal(out[f"{fmt}_labels"], api_labels)
        np.testing.assert_allclose(out[f"{fmt}_scores"], api_scores, rtol=0, atol=1e-6)
    assert out["skops_record"] == document
    assert out["onnx_privacy"] == document["privacy"]
    assert out["onnx_model_id"] == model["id"]
