"""Uploaded weights are bounded and predict answers finite, documented values for every stored
model (issue 18 item 5).

* ``POST /v1/models``: a weight with |w| > ``MAX_ABS_WEIGHT`` (1e6) is a 422 naming
  ``body.weights.<i>``; ±1e6 itself is accepted. Nothing is stored on a 422.
* ``POST /v1/models/{id}/predict`` on a model at the bound and on a model stored before the
  bound existed with weights near the float64 maximum (written into the database here, as an
  older server could have stored it), with extreme inputs: every ``score`` is a finite number
  within ±``MAX_ABS_SCORE``, ``positive`` is ``score > 0`` and ``probability`` is in [0, 1].
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from service.domain.datasets.spec import FeatureInput
from service.domain.errors import InvalidInputError
from service.domain.models.catalog import MAX_ABS_WEIGHT, build_upload
from service.domain.models.predict import MAX_ABS_SCORE
from tests.api.test_models import UPLOAD_WEIGHTS, _no_models, upload_body
from tests.conftest import SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: Rows at the ends of what JSON can carry; numbers are clamped to the public bounds.
EXTREME_ROWS: list[dict[str, Any]] = [
    {"age": 1e308, "color": "red", "income": 1e308},
    {"age": -1e308, "color": "green", "income": -1e308},
    {"age": 5e-324, "color": "blue", "income": 0},
    {"age": 90, "color": "purple", "income": 1000},
    {"age": 18, "color": "red", "income": 0},
]


def _upload(client: TestClient, site: SiteHandle, weights: list[float]) -> Any:
    return client.post("/v1/models", json=upload_body(weights=weights), headers=site.headers)


def _predict(client: TestClient, site: SiteHandle, model_id: str) -> list[dict[str, Any]]:
    response = client.post(
        f"/v1/models/{model_id}/predict", json={"rows": EXTREME_ROWS}, headers=site.headers
    )
    assert response.status_code == 200, response.text
    assert "null" not in json.dumps([p["score"] for p in response.json()["predictions"]])
    predictions: list[dict[str, Any]] = response.json()["predictions"]
    for p in predictions:
        assert isinstance(p["score"], float | int)
        assert math.isfinite(p["score"])
        assert abs(p["score"]) <= MAX_ABS_SCORE
        assert p["positive"] == (p["score"] > 0)
        assert 0.0 <= p["probability"] <= 1.0
    return predictions


@pytest.mark.parametrize("bad", [MAX_ABS_WEIGHT * 1.000001, -1e300, 1.7976931348623157e308])
def test_a_weight_over_the_bound_is_a_422_naming_it(
    client: TestClient, site: SiteHandle, bad: float
) -> None:
    weights = list(UPLOAD_WEIGHTS)
    weights[3] = bad
    response = _upload(client, site, weights)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert [e["loc"] for e in problem["errors"]] == [["body", "weights", 3]]
    assert "1,000,000" in problem["errors"][0]["msg"]
    assert _no_models(client, site)


def test_weights_at_the_bound_predict_finite_values_for_extreme_rows(
    client: TestClient, site: SiteHandle
) -> None:
    weights = [MAX_ABS_WEIGHT, -MAX_ABS_WEIGHT, MAX_ABS_WEIGHT, -MAX_ABS_WEIGHT, 0.0, 0.0]
    response = _upload(client, site, weights)
    assert response.status_code == 201, response.text
    predictions = _predict(client, site, response.json()["id"])
    # age (clamped) at 90 and income at 1000 with color purple: score = 1e6·x_age > 0
    assert predictions[3]["positive"] is True


def test_a_stored_model_with_huge_weights_predicts_finite_clipped_values(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    response = _upload(client, site, list(UPLOAD_WEIGHTS))
    assert response.status_code == 201, response.text
    model_id = response.json()["id"]
    huge = 1.7e308  # x_age·w_age + x_red·w_red overflows to inf; with w_green: inf − inf
    body = {"kind": "linear", "coef": [huge, huge, -huge, huge, -huge, huge]}
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE model SET body = :body WHERE id = :id"),
            {"body": json.dumps(body), "id": model_id},
        )
    predictions = _predict(client, site, model_id)
    # every row has the intercept (w = +huge) and a non-negative rest, so scores are huge and
    # positive, clipped to the documented bound, with probability exactly 1
    first = predictions[0]
    assert first["score"] == MAX_ABS_SCORE
    assert first["probability"] == 1.0


def test_the_domain_refuses_weights_over_the_bound_for_any_caller() -> None:
    features = [FeatureInput(column="age", type="numeric", lower=0, upper=1)]
    with pytest.raises(InvalidInputError) as info:
        build_upload(
            label={"column": "y", "positive": "yes"},
            features=features,
            row_norm="clip",
            weights=[0.5, -2e6],
            loss="logistic",
            claim=None,
        )
    assert info.value.errors == [
        {"loc": ["body", "weights", 1], "msg": "must be finite with |w| <= 1,000,000"}
    ]
    upload = build_upload(
        label={"column": "y", "positive": "yes", "negative": "no"},
        features=features,
        row_norm="clip",
        weights=[MAX_ABS_WEIGHT, -MAX_ABS_WEIGHT],
        loss="logistic",
        claim=None,
    )
    assert dict(upload.label) == {"column": "y", "positive": "yes", "negative": "no"}
