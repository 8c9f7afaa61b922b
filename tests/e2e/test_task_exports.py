"""Exports of multi-class and regression models predict what PrivFit predicts (issue 29).

Models are fitted through the API on a small dataset with a multi-class label (objective
perturbation) and a numeric one (AdaSSP), plus a stored multi-class model whose first and last
classes score the same on every row (a tie). Each is exported as PrivFit's JSON document, a
skops archive and ONNX; every file is loaded in a fresh Python process that imports no PrivFit
code (the JSON document through the README's own conversion, the others with skops or
onnxruntime) and its predictions on rows the service also scored are compared with the API's:

* multi-class: the same classes (the first class on a tie), scores to 1e-9 and probabilities
  to 1e-12 in float64; probabilities to float32 precision for ONNX;
* regression: the same values to 1e-9 (float64) or to float32 precision (ONNX), never outside
  the label's bounds (tests/unit/domain/test_export.py checks values clipped at both bounds).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.db.models import Model, new_id
from service.db.uow import UnitOfWorkFactory
from tests.api.test_label_tasks import CLASSES, LOWER, MULTICLASS, NUMERIC, ROWS, uploaded
from tests.conftest import SiteHandle

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
#: The API's rows, plus a category nobody declared and ages outside the public bounds.
PREDICT_ROWS: list[dict[str, Any]] = [{"age": r[1], "color": r[2]} for r in ROWS] + [
    {"age": 5, "color": "purple"},
    {"age": 200, "color": "red"},
    {"age": 54, "color": "blue"},
]
KINDS = {"age": "numeric", "color": "categorical"}


def _fit(client: TestClient, site: SiteHandle, label: dict[str, Any], body: dict[str, Any]) -> str:
    dataset = uploaded(client, site, label)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits",
        json={"epsilon": 1.0, "delta": 1e-6, "regularization": 0.05, **body},
        headers={**site.headers, "Prefer": "wait=60"},
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    model_id: str = job["model_id"]
    return model_id


def _tied_model(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory, fitted_id: str
) -> str:
    """A stored multi-class model whose classes 0 and 2 tie on every row (class 1 is lower),
    over the preprocessing and label of the fitted model ``fitted_id``."""
    fitted = client.get(f"/v1/models/{fitted_id}", headers=site.headers).json()
    first = [float(v) for v in fitted["model"]["coef"][0]]
    with uow_factory() as uow:
        model = uow.models.add(
            Model(
                id=new_id(),
                owner_site_id=site.id,
                source="fit",
                mechanism="objective_perturbation",
                loss="logistic",
                feature_names=fitted["feature_names"],
                preprocessing=fitted["preprocessing"],
                body={"kind": "multiclass", "coef": [first, [v - 1.0 for v in first], first]},
                label=fitted["label"],
                privacy=fitted["privacy"],
            )
        )
        uow.commit()
        return model.id


@pytest.fixture
def models(client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory) -> dict[str, str]:
    multiclass = _fit(client, site, MULTICLASS, {"mechanism": "objective_perturbation"})
    return {
        "multiclass": multiclass,
        "tie": _tied_model(client, site, uow_factory, multiclass),
        "regression": _fit(client, site, NUMERIC, {"mechanism": "adassp"}),
    }


def _readme_conversion() -> str:
    """The README's numpy + scikit-learn conversion of a JSON export (no PrivFit code)."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    (code,) = [str(b) for b in blocks if "def to_sklearn" in b]
    return code


_JSON_RUNNER = """
import json, sys
import numpy as np
out = []
for path, rows_path in json.load(open(sys.argv[1])):
    doc, rows = json.load(open(path)), json.load(open(rows_path))
    est, X = to_sklearn(doc), preprocess(doc, rows)
    if doc["task"] == "regression":
        low, high = doc["label"]["lower"], doc["label"]["upper"]
        out.append({"values": np.clip(est.predict(X), low, high).tolist()})
    else:
        out.append({"scores": est.decision_function(X).tolist(),
                    "labels": est.predict(X).tolist(),
                    "probabilities": est.predict_proba(X).tolist(),
                    "classes": est.classes_.tolist()})
print(json.dumps(out))
"""

_SKOPS_RUNNER = """
import json, sys
import pandas as pd, skops.io
out = []
for path, rows_path in json.load(open(sys.argv[1])):
    untrusted = skops.io.get_untrusted_types(file=path)
    assert untrusted == [], untrusted
    pipeline = skops.io.load(path, trusted=[])
    rows = pd.DataFrame(json.load(open(rows_path)))
    rows["age"], rows["color"] = rows["age"].astype(float), rows["color"].astype(str)
    metadata = json.loads(pipeline.privfit_metadata_)
    if metadata["privfit.task"] == "regression":
        out.append({"values": pipeline.predict(rows).tolist(), "metadata": metadata})
    else:
        out.append({"scores": pipeline.decision_function(rows).tolist(),
                    "labels": pipeline.predict(rows).tolist(),
                    "probabilities": pipeline.predict_proba(rows).tolist(),
                    "metadata": metadata})
print(json.dumps(out))
"""

_ONNX_RUNNER = """
import json, sys
import numpy as np, onnx, onnxruntime
out = []
for path, rows_path in json.load(open(sys.argv[1])):
    rows = json.load(open(rows_path))
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    metadata = {p.key: p.value for p in onnx.load(path).metadata_props}
    columns = json.loads(metadata["privfit.input_columns"])
    feeds = {
        entry.name: (np.array([[str(r[c])] for r in rows]) if c == "color"
                     else np.array([[float(r[c])] for r in rows], dtype=np.float32))
        for entry, c in zip(session.get_inputs(), columns, strict=True)
    }
    names = [o.name for o in session.get_outputs()]
    result = dict(zip(names, session.run(None, feeds), strict=True))
    answer = {"metadata": metadata, "outputs": names}
    if "value" in result:
        answer["values"] = result["value"][:, 0].tolist()
    else:
        answer["labels"] = result["label"].tolist()
        answer["probabilities"] = result["probabilities"].tolist()
    out.append(answer)
print(json.dumps(out))
"""


def _run_fresh(code: str, files: list[tuple[Path, Path]], tmp_path: Path) -> list[dict[str, Any]]:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps([[str(a), str(b)] for a, b in files]))
    result = subprocess.run(
        [sys.executable, "-c", code, str(manifest)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # nothing of the repository on the path: no PrivFit import is possible
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out: list[dict[str, Any]] = json.loads(result.stdout)
    return out


def _api(client: TestClient, site: SiteHandle, model_id: str) -> list[dict[str, Any]]:
    response = client.post(
        f"/v1/models/{model_id}/predict", json={"rows": PREDICT_ROWS}, headers=site.headers
    )
    assert response.status_code == 200, response.text
    predictions: list[dict[str, Any]] = response.json()["predictions"]
    return predictions


def _export(client: TestClient, site: SiteHandle, model_id: str, fmt: str, tmp_path: Path) -> Path:
    response = client.get(
        f"/v1/models/{model_id}/export", params={"format": fmt}, headers=site.headers
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-disposition"].endswith(f'{model_id}.{fmt}"')
    path = tmp_path / f"{model_id}.{fmt}"
    path.write_bytes(response.content)
    return path


@pytest.mark.parametrize("fmt", ["json", "skops", "onnx"])
def test_every_task_exports_to_a_file_that_predicts_what_privfit_predicts_in_a_fresh_process(
    client: TestClient, site: SiteHandle, models: dict[str, str], fmt: str, tmp_path: Path
) -> None:
    rows_path = tmp_path / "rows.json"
    rows_path.write_text(json.dumps(PREDICT_ROWS))
    names = list(models)
    files = [(_export(client, site, models[name], fmt, tmp_path), rows_path) for name in names]
    runner = {
        "json": _readme_conversion() + _JSON_RUNNER,
        "skops": _SKOPS_RUNNER,
        "onnx": _ONNX_RUNNER,
    }[fmt]
    outputs = dict(zip(names, _run_fresh(runner, files, tmp_path), strict=True))
    document = client.get(f"/v1/models/{models['multiclass']}/export", headers=site.headers)
    assert document.json()["task"] == "multiclass"

    for name in ("multiclass", "tie"):
        api, out = _api(client, site, models[name]), outputs[name]
        predicted = [p["predicted_class"] for p in api]
        probabilities = np.array([p["probabilities"] for p in api])
        if name == "tie":
            assert set(predicted) == {CLASSES[0]}  # the first of the tied classes
        if fmt == "onnx":
            # float32: probabilities to its precision; classes wherever the top two scores
            # are not within float32 rounding of each other (exact ties stay exact)
            np.testing.assert_allclose(out["probabilities"], probabilities, rtol=0, atol=2e-6)
            top = np.sort(np.array([p["scores"] for p in api]), axis=1)
            clear = (top[:, -1] - top[:, -2] > 1e-5) | (top[:, -1] == top[:, -2])
            assert clear.sum() >= len(api) - 3
            assert [c for c, ok in zip(out["labels"], clear, strict=True) if ok] == [
                c for c, ok in zip(predicted, clear, strict=True) if ok
            ]
            assert json.loads(out["metadata"]["privfit.classes"]) == CLASSES
        else:
            scores = np.array([p["scores"] for p in api])
            np.testing.assert_allclose(out["scores"], scores, rtol=0, atol=1e-9)
            np.testing.assert_allclose(out["probabilities"], probabilities, rtol=0, atol=1e-12)
            assert out["labels"] == predicted

    api = _api(client, site, models["regression"])
    values = np.array([p["value"] for p in api])
    got = np.array(outputs["regression"]["values"])
    upper = float(NUMERIC["upper"])  # type: ignore[arg-type]
    assert got.min() >= LOWER
    assert got.max() <= upper
    tolerance = 1e-9 if fmt != "onnx" else 2e-6 * (upper - LOWER)  # ONNX: float32
    np.testing.assert_allclose(got, values, rtol=0, atol=tolerance)
    if fmt == "onnx":
        assert outputs["regression"]["outputs"] == ["value"]
    if fmt != "json":
        metadata = outputs["regression"]["metadata"]
        assert metadata["privfit.task"] == "regression"
        record = client.get(f"/v1/models/{models['regression']}", headers=site.headers).json()
        assert json.loads(metadata["privfit.privacy"])["epsilon"] == record["privacy"]["epsilon"]
