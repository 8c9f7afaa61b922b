"""Standard exports predict exactly what PrivFit predicts (issue 17 item 3).

A model fitted on Adult through the API is exported as a skops archive and as ONNX; each file
is loaded in a fresh Python process (only scikit-learn/skops or onnxruntime, no PrivFit code)
and its predictions on the Adult test split are compared with the API's: the same classes,
the same scores (skops) or probabilities (ONNX, float32) to the stated tolerance. Both files
carry the privacy record.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.csv as pa_csv
import pytest
from fastapi.testclient import TestClient

from benchmarks.adult import csv_bytes, load_spec
from service.settings import Settings
from tests.conftest import SiteHandle

pytestmark = pytest.mark.slow

ROWS = 3000  # of the test split, sent in batches of 1000 like any client would


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Room for Adult's training split in one upload."""
    return settings.model_copy(update={"max_request_bytes": 64 * 1024 * 1024})


@pytest.fixture
def fitted(client: TestClient, site: SiteHandle) -> tuple[str, list[dict[str, Any]], np.ndarray]:
    spec = load_spec()
    upload = client.post(
        "/v1/datasets",
        files={
            "file": ("adult.csv", csv_bytes("train"), "text/csv"),
            "spec": (None, json.dumps(spec)),
        },
        headers=site.headers,
    )
    assert upload.status_code == 201, upload.text
    fit = client.post(
        f"/v1/datasets/{upload.json()['id']}/fits",
        json={"mechanism": "objective_perturbation", "epsilon": 1.0, "regularization": 1e-3},
        headers={**site.headers, "Prefer": "wait=120"},
    )
    assert fit.status_code == 201, fit.text
    model_id = fit.json()["model_id"]
    table = pa_csv.read_csv(io.BytesIO(csv_bytes("test")))
    columns = [f["column"] for f in spec["features"]]
    complete = [
        {c: row[c] for c in columns}
        for row in table.to_pylist()
        if all(row[c] not in (None, "", "?") for c in columns)
    ]
    rows = complete[:ROWS]
    scores: list[float] = []
    for start in range(0, len(rows), 1000):
        answer = client.post(
            f"/v1/models/{model_id}/predict",
            json={"rows": rows[start : start + 1000]},
            headers=site.headers,
        )
        assert answer.status_code == 200, answer.text
        scores += [p["score"] for p in answer.json()["predictions"]]
    return model_id, rows, np.array(scores)


_SKOPS_RUNNER = """
import json, sys
import pandas as pd, skops.io
path, rows_path = sys.argv[1], sys.argv[2]
untrusted = skops.io.get_untrusted_types(file=path)
assert untrusted == [], untrusted
pipeline = skops.io.load(path, trusted=[])
rows = pd.DataFrame(json.load(open(rows_path)))
for column, kind in json.load(open(rows_path + ".kinds")).items():
    rows[column] = rows[column].astype(str) if kind == "categorical" else rows[column].astype(float)
print(json.dumps({
    "scores": pipeline.decision_function(rows).tolist(),
    "labels": pipeline.predict(rows).tolist(),
    "metadata": json.loads(pipeline.privfit_metadata_),
    "pickle_free": True,
}))
"""

_ONNX_RUNNER = """
import json, sys
import numpy as np, onnx, onnxruntime
path, rows_path = sys.argv[1], sys.argv[2]
rows = json.load(open(rows_path))
kinds = json.load(open(rows_path + ".kinds"))
session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
metadata = {p.key: p.value for p in onnx.load(path).metadata_props}
columns = json.loads(metadata["privfit.input_columns"])
feeds = {
    entry.name: (np.array([[str(r[column])] for r in rows]) if kinds[column] == "categorical"
                 else np.array([[float(r[column])] for r in rows], dtype=np.float32))
    for entry, column in zip(session.get_inputs(), columns, strict=True)
}
labels, probabilities = session.run(None, feeds)
print(json.dumps({"labels": labels.tolist(), "probabilities": probabilities[:, 1].tolist(),
                  "metadata": metadata}))
"""


def _run(code: str, path: Path, rows_path: Path) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", code, str(path), str(rows_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def _write_rows(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    rows_path = tmp_path / "rows.json"
    rows_path.write_text(json.dumps(rows))
    kinds = {f["column"]: f["type"] for f in load_spec()["features"]}
    Path(str(rows_path) + ".kinds").write_text(json.dumps(kinds))
    return rows_path


def test_skops_pipeline_predicts_what_privfit_predicts_in_a_fresh_process(
    client: TestClient, site: SiteHandle, fitted: Any, tmp_path: Path
) -> None:
    model_id, rows, scores = fitted
    export = client.get(f"/v1/models/{model_id}/export?format=skops", headers=site.headers)
    assert export.status_code == 200, export.text
    assert export.headers["content-disposition"].endswith(f'{model_id}.skops"')
    path = tmp_path / "model.skops"
    path.write_bytes(export.content)
    out = _run(_SKOPS_RUNNER, path, _write_rows(tmp_path, rows))
    np.testing.assert_allclose(out["scores"], scores, rtol=0, atol=1e-9)
    assert out["labels"] == [1 if s > 0 else -1 for s in scores]
    privacy = json.loads(out["metadata"]["privfit.privacy"])
    document = client.get(f"/v1/models/{model_id}/export", headers=site.headers).json()
    assert privacy == document["privacy"]
    assert privacy["epsilon"] == 1.0
    assert out["metadata"]["privfit.model_id"] == model_id


def test_onnx_model_predicts_what_privfit_predicts_in_a_fresh_process(
    client: TestClient, site: SiteHandle, fitted: Any, tmp_path: Path
) -> None:
    model_id, rows, scores = fitted
    export = client.get(f"/v1/models/{model_id}/export?format=onnx", headers=site.headers)
    assert export.status_code == 200, export.text
    path = tmp_path / "model.onnx"
    path.write_bytes(export.content)
    out = _run(_ONNX_RUNNER, path, _write_rows(tmp_path, rows))
    expected = [1.0 / (1.0 + math.exp(-s)) for s in scores]
    # ONNX computes in float32: probabilities agree to float32 precision.
    np.testing.assert_allclose(out["probabilities"], expected, rtol=0, atol=2e-6)
    decided = [1 if s > 0 else -1 for s in scores]
    close_calls = [i for i, s in enumerate(scores) if abs(s) < 1e-5]  # float32 ties at 0
    assert [v for i, v in enumerate(out["labels"]) if i not in close_calls] == [
        v for i, v in enumerate(decided) if i not in close_calls
    ]
    document = client.get(f"/v1/models/{model_id}/export", headers=site.headers).json()
    assert json.loads(out["metadata"]["privfit.privacy"]) == document["privacy"]


def test_an_unknown_format_is_a_422(client: TestClient, site: SiteHandle) -> None:
    answer = client.get(f"/v1/models/{'0' * 32}/export?format=pickle", headers=site.headers)
    assert answer.status_code == 422
    assert answer.headers["content-type"] == "application/problem+json"
