"""The export document is self-contained JSON, and scikit-learn reproduces the service's scores."""

from __future__ import annotations

import json
import warnings
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from service.domain.models.export import (
    EXPORT_FORMAT,
    EXPORT_FORMAT_VERSION,
    build_export,
    preprocess,
    to_sklearn,
)
from service.domain.models.predict import predict_rows
from service.domain.randomness import Randomness
from service.domain.records.base import DatasetRef, fit_privacy_record
from service.dp import fit
from service.dp.core.released import StackedModel, model_from_dict
from service.dp.data.preprocessing import PreprocessingSpec
from tests.unit.domain import _data

LABEL = {"column": "bought", "positive": "yes"}


def export_of(spec: PreprocessingSpec, mechanism: str = "objective_perturbation") -> dict[str, Any]:
    data, y = _data.rows(400)
    X = spec.transform(_data.columns(data))
    result = fit(X, y, mechanism, epsilon=1.0, regularization=0.01, rng=np.random.default_rng(1))
    record = fit_privacy_record(
        result,
        datasets=[DatasetRef("d1", "shop")],
        randomness=Randomness(seed=1),
        job_id="j1",
        charged={"d1": (1.0, 0.0)},
    )
    doc = build_export(
        model_id="m1",
        source="fit",
        mechanism=result.mechanism,
        loss="logistic",
        feature_names=spec.feature_names(),
        preprocessing=spec.to_dict(),
        body=result.model.to_dict(),
        privacy=record,
        label=LABEL,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    # what the HTTP layer sends: it must survive strict JSON
    parsed: dict[str, Any] = json.loads(json.dumps(doc, allow_nan=False))
    return parsed


@pytest.mark.parametrize(
    "spec",
    [_data.spec(), _data.spec(row_norm="scale"), _data.spec(projection=True)],
    ids=["clip", "scale", "projection"],
)
def test_sklearn_conversion_agrees_with_the_service(spec: PreprocessingSpec) -> None:
    doc = export_of(spec)
    assert (doc["format"], doc["format_version"]) == (EXPORT_FORMAT, EXPORT_FORMAT_VERSION)
    assert doc["feature_names"] == list(spec.feature_names())
    assert doc["label"] == LABEL
    assert doc["privacy"]["mechanism"] == "objective_perturbation"
    rows, _ = _data.rows(300, seed=9)
    rows[0]["color"] = "purple"  # undeclared category: all-zero block in both implementations
    service_model = model_from_dict(doc["model"])
    X = preprocess(doc, rows)
    np.testing.assert_allclose(X, spec.transform(_data.columns(rows)), atol=1e-12)

    estimator = to_sklearn(doc)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sk_scores = estimator.decision_function(X)
        sk_proba = estimator.predict_proba(X)[:, 1]
        sk_pred = estimator.predict(X)
    ok_rows = rows[1:]
    service = predict_rows(service_model, spec, ok_rows, loss="logistic")
    np.testing.assert_allclose(sk_scores[1:], [p.score for p in service], atol=1e-9)
    probabilities = [p.probability for p in service]
    assert None not in probabilities
    np.testing.assert_allclose(sk_proba[1:], np.asarray(probabilities, dtype=float), atol=1e-9)
    assert list(sk_pred[1:]) == [1 if p.positive else -1 for p in service]
    assert set(estimator.classes_) == {-1, 1}


def test_stacked_models_export_without_weights() -> None:
    spec = _data.spec()
    stacked = StackedModel(
        method="samples",
        low_level=(np.ones(6), -np.ones(6)),
        high_level=np.array([1.0, 2.0, 0.5]),
        groups=None,
        n_features=6,
    )
    doc = build_export(
        model_id="m",
        source="fit",
        mechanism="stacking_samples",
        loss="logistic",
        feature_names=spec.feature_names(),
        preprocessing=spec.to_dict(),
        body=stacked.to_dict(),
        privacy={"epsilon": 1.0},
        label=None,
        created_at=None,
    )
    assert model_from_dict(doc["model"]).to_dict() == stacked.to_dict()
    assert doc["weights"] is None
    assert doc["model"]["kind"] == "stacked"
    with pytest.raises(ValueError, match="linear"):
        to_sklearn(doc)


def test_only_privfit_exports_convert() -> None:
    with pytest.raises(ValueError, match="supported"):
        to_sklearn({"format": "other", "format_version": 1, "weights": {"coef": [1.0]}})


def test_weights_must_match_feature_names() -> None:
    spec = _data.spec()
    with pytest.raises(ValueError, match="feature names"):
        build_export(
            model_id="m",
            source="upload",
            mechanism=None,
            loss="logistic",
            feature_names=spec.feature_names(),
            preprocessing=spec.to_dict(),
            body={"kind": "linear", "coef": [1.0, 2.0]},
            privacy={},
            label=None,
            created_at=None,
        )
