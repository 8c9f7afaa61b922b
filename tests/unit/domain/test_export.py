"""The export document is self-contained JSON, and scikit-learn reproduces the service's scores."""

from __future__ import annotations

import json
import warnings
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from service.domain.datasets.labels import LabelTask
from service.domain.models.export import (
    EXPORT_FORMAT,
    EXPORT_FORMAT_VERSION,
    build_export,
    preprocess,
    to_sklearn,
)
from service.domain.models.predict import predict_rows
from service.domain.models.standard_export import sklearn_pipeline, to_skops
from service.domain.randomness import Randomness
from service.domain.records.base import DatasetRef, fit_privacy_record
from service.dp import LinearModel, fit
from service.dp.core.released import MulticlassModel, StackedModel, model_from_dict
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
    np.testing.assert_allclose(
        sk_scores[1:], np.asarray([p.score for p in service], dtype=float), atol=1e-9
    )
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


# --- multi-class and regression (issue 29) ---------------------------------------------------

CLASSES3 = ["low", "mid", "high"]
MULTICLASS_LABEL: dict[str, Any] = {"column": "grade", "classes": CLASSES3}
NUMERIC_LABEL: dict[str, Any] = {"column": "hours", "lower": 5.0, "upper": 45.0}


def task_export(label: dict[str, Any], body: dict[str, Any], spec: PreprocessingSpec) -> Any:
    doc = build_export(
        model_id="m2",
        source="fit",
        mechanism="non_private",
        loss="logistic" if "classes" in label else "squared",
        feature_names=spec.feature_names(),
        preprocessing=spec.to_dict(),
        body=body,
        privacy={"epsilon": None},
        label=label,
        created_at=None,
    )
    return json.loads(json.dumps(doc, allow_nan=False))


def multiclass_body(spec: PreprocessingSpec, *, tie: bool = False) -> dict[str, Any]:
    coef = np.random.default_rng(4).normal(size=(3, spec.n_features)) * 3
    if tie:  # classes 0 and 2 score the same on every row, above class 1
        coef[2] = coef[0]
        coef[1] = coef[0] - 1.0
    return MulticlassModel(coef=coef).to_dict()


def regression_body(spec: PreprocessingSpec) -> dict[str, Any]:
    # large weights, so that many scores fall outside [−1, 1] and the value is clipped
    return LinearModel(coef=np.random.default_rng(5).normal(size=spec.n_features) * 4).to_dict()


def service_predictions(doc: dict[str, Any], rows: list[dict[str, Any]]) -> list[Any]:
    spec = PreprocessingSpec.from_dict(doc["preprocessing"])
    return predict_rows(
        model_from_dict(doc["model"]),
        spec,
        rows,
        loss=doc["loss"],
        labels=LabelTask.from_label(doc["label"]),
    )


def frame_of(rows: list[dict[str, Any]]) -> Any:
    import pandas as pd

    frame = pd.DataFrame(rows)
    frame["color"] = frame["color"].astype(str)
    return frame


@pytest.mark.parametrize("row_norm", ["clip", "scale"])
@pytest.mark.parametrize("tie", [False, True], ids=["scores", "tie"])
def test_a_multiclass_export_is_a_multinomial_logistic_regression_over_the_declared_classes(
    row_norm: str, tie: bool
) -> None:
    spec = _data.spec(row_norm=row_norm)
    doc = task_export(MULTICLASS_LABEL, multiclass_body(spec, tie=tie), spec)
    assert doc["task"] == "multiclass"
    assert doc["classes"] == CLASSES3
    assert len(doc["weights"]["coef"]) == 3
    assert doc["weights"]["intercept"] == [0.0, 0.0, 0.0]
    rows, _ = _data.rows(300, seed=9)
    service = service_predictions(doc, rows)
    scores = np.array([p.scores for p in service])
    probabilities = np.array([p.probabilities for p in service])
    predicted = [p.predicted_class for p in service]
    if tie:
        assert set(predicted) == {"low"}  # the first of the tied classes
    estimator = to_sklearn(doc)
    pipeline = sklearn_pipeline(doc)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        X = preprocess(doc, rows)
        got = [
            (estimator.decision_function(X), estimator.predict_proba(X), estimator.predict(X)),
            (
                pipeline.decision_function(frame_of(rows)),
                pipeline.predict_proba(frame_of(rows)),
                pipeline.predict(frame_of(rows)),
            ),
        ]
    for sk_scores, sk_proba, sk_pred in got:
        np.testing.assert_allclose(sk_scores, scores, rtol=0, atol=1e-9)
        np.testing.assert_allclose(sk_proba, probabilities, rtol=0, atol=1e-12)
        assert list(sk_pred) == predicted
    assert list(estimator.classes_) == CLASSES3  # declared order, not sorted


@pytest.mark.parametrize("row_norm", ["clip", "scale"])
def test_a_regression_export_clips_its_value_to_the_label_bounds_like_the_service(
    row_norm: str,
) -> None:
    spec = _data.spec(row_norm=row_norm)
    doc = task_export(NUMERIC_LABEL, regression_body(spec), spec)
    assert doc["task"] == "regression"
    assert doc["classes"] is None
    assert "label.lower + (clip(score, −1, 1) + 1)/2" in doc["decision_rule"]
    rows, _ = _data.rows(300, seed=9)
    service = service_predictions(doc, rows)
    values = np.array([p.value for p in service])
    assert (values == 5.0).any()
    assert (values == 45.0).any()
    assert ((values > 5.0) & (values < 45.0)).any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        linear = to_sklearn(doc).predict(preprocess(doc, rows))
        piped = sklearn_pipeline(doc).predict(frame_of(rows))
    # the JSON conversion: a LinearRegression in the label's units, clipped by the reader
    np.testing.assert_allclose(np.clip(linear, 5.0, 45.0), values, rtol=0, atol=1e-9)
    # the pipeline clips by itself, exactly within the bounds
    np.testing.assert_allclose(piped, values, rtol=0, atol=1e-9)
    assert piped.min() >= 5.0
    assert piped.max() <= 45.0
    slope = to_sklearn(doc).coef_
    np.testing.assert_allclose(slope, np.asarray(doc["weights"]["coef"]) * 20.0, rtol=1e-15)
    assert to_sklearn(doc).intercept_ == 25.0


@pytest.mark.parametrize(
    ("label", "body", "message"),
    [
        (MULTICLASS_LABEL, {"kind": "linear", "coef": [1.0] * 6}, "task"),
        (LABEL, {"kind": "multiclass", "coef": [[1.0] * 6] * 3}, "task"),
        (
            {"column": "grade", "classes": ["a", "b", "c", "d"]},
            {"kind": "multiclass", "coef": [[1.0] * 6] * 3},
            "one row per declared class",
        ),
        (MULTICLASS_LABEL, {"kind": "multiclass", "coef": [[1.0] * 5] * 3}, "feature names"),
    ],
)
def test_weights_that_do_not_fit_the_label_are_not_exported(
    label: dict[str, Any], body: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        task_export(label, body, _data.spec())


def test_standard_exports_of_every_task_hold_only_trusted_types_and_their_task() -> None:
    import skops.io

    spec = _data.spec()
    cases: list[tuple[dict[str, Any], dict[str, Any]]] = [
        (MULTICLASS_LABEL, multiclass_body(spec)),
        (NUMERIC_LABEL, regression_body(spec)),
    ]
    for label, body in cases:
        doc = task_export(label, body, spec)
        data = to_skops(doc)
        assert skops.io.get_untrusted_types(data=data) == []
        metadata = json.loads(skops.io.loads(data, trusted=[]).privfit_metadata_)
        assert metadata["privfit.task"] == doc["task"]
        assert json.loads(metadata["privfit.classes"]) == doc["classes"]
