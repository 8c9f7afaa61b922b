"""Uploading a site's own multi-class or regression model (issue 29), on SQLite and PostgreSQL.

* ``POST /v1/models`` with a ``classes`` label takes K rows of d weights (row k scores
  ``classes[k]``); with ``lower``/``upper`` one vector scoring in the label's [−1, 1] units.
  The stored model predicts what this test computes by hand from the declared spec: the
  softmax of W x and the class of the largest score; L + (clip(wᵀx, −1, 1) + 1)/2 · (U − L).
* Round trips: a model PrivFit fitted, exported as JSON and uploaded back from the export's
  ``label``, ``preprocessing`` and ``weights.coef``, predicts exactly what the fitted one does.
* Every bad input (a shape that does not match the label or the feature spec, a non-finite or
  too large weight, a loss that does not suit the task, a mixed label form) is a 422
  problem+json naming the field, with nothing stored and nothing audited.
* Uploaded models join a study of the same task and are averaged entry by entry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from numpy.typing import NDArray
from scipy import special
from sqlalchemy import Engine, text

from service.dp.data.preprocessing import PreprocessingSpec
from service.dp.noise.draws import round_to_grid
from tests.api._studies import contribute, create_study
from tests.api.test_datasets import assert_problem
from tests.api.test_label_tasks import (
    CLASSES,
    FEATURES,
    LOWER,
    MULTICLASS,
    NUMERIC,
    ROWS,
    UPPER,
    _model_of,
    _predict,
    uploaded,
)
from tests.conftest import MakeSite, SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: age, color=red, color=green, color=blue, intercept
D = 5
MATRIX = [
    [1.5, 0.25, -0.5, 0.0, -0.75],
    [0.0, -0.25, 0.5, 0.125, 0.5],
    [-1.25, 0.0, 0.0, 0.5, 0.25],
]
VECTOR = [6.0, 0.5, -0.25, 0.0, -3.0]
SCORED: list[dict[str, Any]] = [{"age": r[1], "color": r[2]} for r in ROWS]


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def body(label: Mapping[str, Any], weights: Any, **overrides: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"label": dict(label), "features": FEATURES, "weights": weights}
    out.update(overrides)
    return out


def design(preprocessing: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Any:
    """The rows as this test preprocesses them itself (from the declared spec)."""
    spec = PreprocessingSpec.from_dict(preprocessing)
    columns: dict[str, NDArray[Any]] = {
        "age": np.array([float(r["age"]) for r in rows]),
        "color": np.array([str(r["color"]) for r in rows]),
    }
    return spec.transform(columns)


def post(client: TestClient, site: SiteHandle, payload: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/models", json=payload, headers=site.headers)
    assert response.status_code == 201, response.text
    out: dict[str, Any] = response.json()
    return out


def stored(engine: Engine) -> tuple[int, int]:
    """(model rows, model.uploaded audit events)."""
    with engine.connect() as connection:
        models = connection.execute(text("SELECT COUNT(*) FROM model")).scalar_one()
        events = connection.execute(
            text("SELECT COUNT(*) FROM audit_event WHERE action = 'model.uploaded'")
        ).scalar_one()
    return int(models), int(events)


# ---- the two forms -------------------------------------------------------------------------


def test_a_multiclass_upload_scores_each_declared_class_with_its_row(
    client: TestClient, site: SiteHandle
) -> None:
    model = post(client, site, body(MULTICLASS, MATRIX, privacy_claim={"epsilon": 1.0}))
    assert (model["source"], model["task"], model["loss"]) == ("upload", "multiclass", "logistic")
    assert model["label"] == MULTICLASS
    assert model["model"] == {"kind": "multiclass", "coef": MATRIX}
    assert model["coefficients"] is None  # one row per class: see `model`
    assert model["privacy"]["verified"] is False
    (summary,) = client.get("/v1/models", headers=site.headers).json()["items"]
    assert summary["task"] == "multiclass"

    predictions = _predict(client, site, model["id"])
    scores = design(model["preprocessing"], SCORED) @ np.asarray(MATRIX).T
    np.testing.assert_allclose([p["scores"] for p in predictions], scores, rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        [p["probabilities"] for p in predictions],
        special.softmax(scores, axis=1),
        rtol=0,
        atol=1e-12,
    )
    assert [p["predicted_class"] for p in predictions] == [
        CLASSES[int(k)] for k in np.argmax(scores, axis=1)
    ]
    assert {p["predicted_class"] for p in predictions} == set(CLASSES)  # every row counts

    doc = client.get(f"/v1/models/{model['id']}/export", headers=site.headers).json()
    assert (doc["task"], doc["classes"]) == ("multiclass", CLASSES)
    assert doc["weights"]["coef"] == MATRIX


def test_a_regression_upload_scores_in_the_unit_interval_and_predicts_within_the_bounds(
    client: TestClient, site: SiteHandle
) -> None:
    model = post(client, site, body(NUMERIC, VECTOR))
    assert (model["task"], model["loss"]) == ("regression", "squared")  # the task's default
    assert model["label"] == NUMERIC
    assert [c["weight"] for c in model["coefficients"]] == VECTOR

    predictions = _predict(client, site, model["id"])
    s = design(model["preprocessing"], SCORED) @ np.asarray(VECTOR)
    expected = LOWER + (np.clip(s, -1.0, 1.0) + 1.0) / 2.0 * (UPPER - LOWER)
    np.testing.assert_allclose([p["score"] for p in predictions], s, rtol=0, atol=1e-12)
    np.testing.assert_allclose([p["value"] for p in predictions], expected, rtol=0, atol=1e-9)
    # the weights reach both clipped ends and the inside of the range
    assert s.min() < -1.0 < 1.0 < s.max()
    assert min(p["value"] for p in predictions) == LOWER
    assert max(p["value"] for p in predictions) == UPPER

    doc = client.get(f"/v1/models/{model['id']}/export", headers=site.headers).json()
    assert doc["task"] == "regression"
    assert doc["weights"]["coef"] == VECTOR
    assert "clip(score, −1, 1)" in doc["decision_rule"]


@pytest.mark.parametrize(("label", "loss"), [(MULTICLASS, "other"), (NUMERIC, "huber")])
def test_a_declared_loss_that_suits_the_task_is_kept(
    client: TestClient, site: SiteHandle, label: dict[str, Any], loss: str
) -> None:
    weights = MATRIX if label is MULTICLASS else VECTOR
    assert post(client, site, body(label, weights, loss=loss))["loss"] == loss


# ---- round trips ---------------------------------------------------------------------------


def from_export(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The upload body of a PrivFit JSON export: its label, features, row norm and weights."""
    return {
        "label": doc["label"],
        "features": doc["preprocessing"]["features"],
        "row_norm": doc["preprocessing"]["row_norm"],
        "weights": doc["weights"]["coef"],
        "loss": doc["loss"],
    }


@pytest.mark.parametrize("label", [MULTICLASS, NUMERIC], ids=["multiclass", "regression"])
def test_an_exported_model_uploaded_back_predicts_the_same(
    client: TestClient, site: SiteHandle, label: dict[str, Any]
) -> None:
    dataset = uploaded(client, site, label, allow_non_private=True)
    fitted = _model_of(client, site, dataset["id"])
    doc = client.get(f"/v1/models/{fitted['id']}/export", headers=site.headers).json()
    again = post(client, site, from_export(json.loads(json.dumps(doc))))
    assert again["task"] == fitted["task"]
    assert again["model"] == fitted["model"]
    assert again["preprocessing"] == fitted["preprocessing"]
    assert again["label"] == fitted["label"] == label
    assert _predict(client, site, again["id"]) == _predict(client, site, fitted["id"])
    redoc = client.get(f"/v1/models/{again['id']}/export", headers=site.headers).json()
    for key in ("task", "classes", "weights", "decision_rule", "preprocessing", "label"):
        assert redoc[key] == doc[key], key


# ---- refusals ------------------------------------------------------------------------------

_ROW_TOO_SHORT = [MATRIX[0], MATRIX[1][:-1], MATRIX[2]]
_TOO_LARGE = [MATRIX[0], MATRIX[1], [*MATRIX[2][:-1], 2e6]]

REFUSALS: list[tuple[str, dict[str, Any], list[Any], str]] = [
    (
        "multiclass-vector",
        body(MULTICLASS, VECTOR),
        ["body", "weights"],
        "one row of 5 weights per class",
    ),
    ("multiclass-two-rows", body(MULTICLASS, MATRIX[:2]), ["body", "weights"], "3 classes"),
    (
        "multiclass-four-rows",
        body(MULTICLASS, [*MATRIX, MATRIX[0]]),
        ["body", "weights"],
        "has 4 rows",
    ),
    ("multiclass-short-row", body(MULTICLASS, _ROW_TOO_SHORT), ["body", "weights", 1], "5 weights"),
    ("regression-rows", body(NUMERIC, MATRIX), ["body", "weights"], "not rows of weights"),
    ("regression-short", body(NUMERIC, VECTOR[:-1]), ["body", "weights"], "has 4 weights"),
    (
        "binary-rows",
        body({"column": "grade", "positive": "high"}, MATRIX),
        ["body", "weights"],
        "not rows of weights",
    ),
    ("multiclass-huber", body(MULTICLASS, MATRIX, loss="huber"), ["body", "loss"], "'huber'"),
    (
        "regression-logistic",
        body(NUMERIC, VECTOR, loss="logistic"),
        ["body", "loss"],
        "'logistic'",
    ),
    (
        "binary-squared",
        body({"column": "grade", "positive": "high"}, VECTOR, loss="squared"),
        ["body", "loss"],
        "'squared'",
    ),
    (
        "mixed-label",
        body({**MULTICLASS, "lower": 0, "upper": 1}, MATRIX),
        ["body", "label"],
        "invalid feature spec",
    ),
    (
        "inverted-bounds",
        body({"column": "hours", "lower": 5, "upper": 1}, VECTOR),
        ["body", "label", "upper"],
        "lower bound",
    ),
    (
        "label-is-a-feature",
        body({"column": "age", "classes": CLASSES}, MATRIX),
        ["body", "label", "column"],
        "also a feature",
    ),
]


@pytest.mark.parametrize(
    ("payload", "loc", "needle"),
    [pytest.param(p, loc, n, id=name) for name, p, loc, n in REFUSALS],
)
def test_a_bad_upload_is_a_422_naming_the_field_and_stores_nothing(
    client: TestClient,
    site: SiteHandle,
    engine: Engine,
    payload: dict[str, Any],
    loc: list[Any],
    needle: str,
) -> None:
    before = stored(engine)
    problem = assert_problem(
        client.post("/v1/models", json=payload, headers=site.headers), 422, "invalid-input"
    )
    assert needle in problem["detail"], problem
    assert problem["errors"][0]["loc"][: len(loc)] == loc, problem
    assert stored(engine) == before


@pytest.mark.parametrize("label", [MULTICLASS, NUMERIC], ids=["multiclass", "regression"])
@pytest.mark.parametrize("bad", ["1e999", "-1e999", "2e6"])
def test_a_non_finite_or_too_large_weight_is_a_422_naming_the_weights(
    client: TestClient, site: SiteHandle, engine: Engine, label: dict[str, Any], bad: str
) -> None:
    weights = MATRIX if label is MULTICLASS else VECTOR
    raw = json.dumps(body(label, weights)).replace("-0.75" if label is MULTICLASS else "-3.0", bad)
    assert bad in raw
    before = stored(engine)
    response = client.post(
        "/v1/models", content=raw, headers={**site.headers, "Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["loc"][:2] == ["body", "weights"]
    assert stored(engine) == before


def test_too_many_classes_are_refused_by_the_servers_limit(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    limit = int(client.app.state.settings.max_classes)  # type: ignore[attr-defined]
    classes = [f"c{k}" for k in range(limit + 1)]
    weights = [[0.0] * D for _ in classes]
    before = stored(engine)
    response = client.post(
        "/v1/models",
        json=body({"column": "grade", "classes": classes}, weights),
        headers=site.headers,
    )
    problem = assert_problem(response, 422, "invalid-input")
    assert problem["errors"][0]["loc"][:3] == ["body", "label", "classes"]
    assert stored(engine) == before


# ---- studies -------------------------------------------------------------------------------


@pytest.mark.parametrize("label", [MULTICLASS, NUMERIC], ids=["multiclass", "regression"])
def test_uploaded_models_join_a_study_of_their_task_and_are_averaged(
    client: TestClient, site: SiteHandle, make_site: MakeSite, label: dict[str, Any]
) -> None:
    a, b = make_site(), make_site()
    study = create_study(
        client, site, [a, b], study_spec={"label": dict(label), "features": FEATURES}
    )
    base = np.asarray(MATRIX if label is MULTICLASS else VECTOR)
    coefs = [base, -0.5 * base + 0.25]
    for member, coef in zip((a, b), coefs, strict=True):
        model = post(client, member, body(label, coef.tolist()))
        contribute(client, member, study["id"], {"model_id": model["id"]})
    response = client.post(
        f"/v1/studies/{study['id']}/aggregations",
        json={"method": "average", "weights": [1.0, 3.0]},
        headers=site.headers,
    )
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    result = client.get(f"/v1/models/{job['model_id']}", headers=a.headers).json()
    expected = round_to_grid(0.25 * coefs[0] + 0.75 * coefs[1])
    assert result["task"] == ("multiclass" if label is MULTICLASS else "regression")
    assert result["label"] == label
    assert np.array_equal(np.asarray(result["model"]["coef"]), expected)
    predictions = _predict(client, a, job["model_id"])
    if label is MULTICLASS:
        assert {p["predicted_class"] for p in predictions} <= set(CLASSES)
    else:
        assert all(LOWER <= p["value"] <= UPPER for p in predictions)


def test_a_study_of_another_task_refuses_an_uploaded_model_naming_the_label(
    client: TestClient, site: SiteHandle, make_site: MakeSite
) -> None:
    member = make_site()
    study = create_study(
        client, site, [member], study_spec={"label": dict(NUMERIC), "features": FEATURES}
    )
    model = post(client, member, body(MULTICLASS, MATRIX))
    response = client.post(
        f"/v1/studies/{study['id']}/contributions",
        json={"model_id": model["id"]},
        headers=member.headers,
    )
    problem = assert_problem(response, 422, "invalid-input")
    assert "label" in problem["detail"]
