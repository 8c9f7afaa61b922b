"""The client uploads a site's own multi-class and regression models (issue 29).

``Client.upload_model`` takes a dict or the generated ``ModelUpload``: a ``classes`` label with
one row of weights per class, a ``lower``/``upper`` label with one vector in the label's
[−1, 1] units. Against a live server: the stored models predict declared classes and numbers
within the bounds, an export uploaded back predicts the same, and a shape that does not match
the label is a ``ValidationFailed`` naming ``weights`` with nothing stored. The command line's
``upload-model`` takes the body as a JSON file, or a PrivFit JSON export.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from privfit_client import Client
from privfit_client.cli import main
from privfit_client.errors import ValidationFailed
from privfit_client.models import DatasetLabelIn, ModelUpload, NumericFeatureIn

from tests.client.conftest import SiteAccount
from tests.support.live_server import LiveServer

CLASSES = ["low", "mid", "high"]
FEATURES: list[dict[str, Any]] = [
    {"column": "age", "type": "numeric", "lower": 18, "upper": 90},
    {"column": "color", "type": "categorical", "categories": ["red", "green", "blue"]},
]
MATRIX = [
    [1.5, 0.25, -0.5, 0.0, -0.75],
    [0.0, -0.25, 0.5, 0.125, 0.5],
    [-1.25, 0.0, 0.0, 0.5, 0.25],
]
ROWS: list[dict[str, Any]] = [
    {"age": age, "color": color}
    for age in (18, 30, 47, 66, 90)
    for color in ("red", "green", "blue")
]


def test_a_multiclass_upload_and_its_export_uploaded_back_predict_the_same(
    site_client: Client,
) -> None:
    model = site_client.upload_model(
        {
            "label": {"column": "grade", "classes": CLASSES},
            "features": FEATURES,
            "weights": MATRIX,
            "privacy_claim": {"epsilon": 1.0, "description": "trained in-house"},
        }
    )
    assert (model.task, model.loss, model.source) == ("multiclass", "logistic", "upload")
    assert model.model["coef"] == MATRIX
    predictions = site_client.predict(model.id, ROWS)
    assert {p.predicted_class for p in predictions} <= set(CLASSES)
    for p in predictions:
        assert p.scores is not None
        assert p.probabilities is not None
        assert math.isclose(sum(p.probabilities), 1.0, rel_tol=1e-12)
        assert p.predicted_class == CLASSES[p.scores.index(max(p.scores))]

    doc = site_client.export(model.id)
    assert doc.weights is not None
    again = site_client.upload_model(
        {
            "label": doc.label,
            "features": doc.preprocessing["features"],
            "row_norm": doc.preprocessing["row_norm"],
            "weights": doc.weights["coef"],
        }
    )
    assert site_client.predict(again.id, ROWS) == predictions


def test_a_regression_upload_predicts_numbers_within_the_bounds(site_client: Client) -> None:
    upload = ModelUpload(
        label=DatasetLabelIn(column="hours", lower=0.0, upper=40.0),
        features=[NumericFeatureIn(type="numeric", column="age", lower=18, upper=90)],
        weights=[4.0, -2.0],
        loss="huber",
    )
    model = site_client.upload_model(upload)
    assert (model.task, model.loss) == ("regression", "huber")
    predictions = site_client.predict(model.id, ROWS)
    values = [p.value for p in predictions]
    assert all(v is not None and 0.0 <= v <= 40.0 for v in values)
    # x = (a, 1)/max(1, ‖(a, 1)‖) with a = (age − 18)/72: age 18 scores −2, clipped to the
    # lower bound; age 90 scores (4 − 2)/√2 ≈ 1.41, clipped to the upper bound
    assert values[0] == 0.0
    assert values[-1] == 40.0


def test_rows_of_weights_for_a_numeric_label_are_refused_naming_the_weights(
    site_client: Client,
) -> None:
    before = len(site_client.models())
    with pytest.raises(ValidationFailed) as caught:
        site_client.upload_model(
            {
                "label": {"column": "hours", "lower": 0, "upper": 40},
                "features": FEATURES,
                "weights": MATRIX,
            }
        )
    assert caught.value.status == 422
    assert [list(e.loc) for e in caught.value.errors] == [["body", "weights"]]
    assert "not rows of weights" in (caught.value.detail or "")
    assert len(site_client.models()) == before


@pytest.fixture
def logged_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, server: LiveServer, site: SiteAccount
) -> None:
    """The command line's credentials for ``site`` (and a private config directory)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config-home"))
    monkeypatch.setenv("PRIVFIT_URL", server.base_url)
    monkeypatch.setenv("PRIVFIT_KEY", site.key)


@pytest.mark.usefixtures("logged_in")
def test_the_command_line_uploads_a_model_file_or_a_privfit_export(
    capsys: pytest.CaptureFixture[str], site_client: Client, tmp_path: Path
) -> None:
    path = tmp_path / "model.json"
    path.write_text(
        json.dumps(
            {
                "label": {"column": "grade", "classes": CLASSES},
                "features": FEATURES,
                "weights": MATRIX,
            }
        )
    )
    assert main(["upload-model", str(path), "--json"]) == 0
    uploaded = json.loads(capsys.readouterr().out)
    assert (uploaded["task"], uploaded["model"]["coef"]) == ("multiclass", MATRIX)

    exported = tmp_path / "export.json"
    exported.write_text(site_client.export(uploaded["id"]).model_dump_json())
    assert main(["upload-model", str(exported)]) == 0
    assert "multiclass" in capsys.readouterr().out
    ids = {m.id for m in site_client.models()}
    (again,) = ids - {uploaded["id"]}
    assert site_client.predict(again, ROWS) == site_client.predict(uploaded["id"], ROWS)

    path.write_text(
        json.dumps(
            {
                "label": {"column": "grade", "classes": CLASSES},
                "features": FEATURES,
                "weights": MATRIX[:2],
            }
        )
    )
    assert main(["upload-model", str(path)]) == 7  # invalid request
    assert "weights" in capsys.readouterr().err
    assert {m.id for m in site_client.models()} == ids
