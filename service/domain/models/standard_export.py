"""A model's export as a scikit-learn ``Pipeline``, saved with ``skops`` or as ONNX.

The pipeline rebuilds PrivFit's public preprocessing from standard scikit-learn steps, so it
predicts exactly what ``POST /v1/models/{id}/predict`` does (same classes, same scores up to
floating-point rounding):

1. a ``ColumnTransformer`` over the raw columns, in the spec's order:

   * a numeric column with public bounds [a, b] → ``MinMaxScaler(clip=True)`` with
     ``scale_ = 1/(b − a)`` and ``min_ = −a/(b − a)``: v ↦ clip((v − a)/(b − a), 0, 1), which
     equals PrivFit's clamp-then-map because the affine map is increasing;
   * a categorical column → ``OneHotEncoder`` over the declared categories with
     ``handle_unknown="ignore"`` (an undeclared value is the all-zero block, as in PrivFit);
     values are compared as text, so the pipeline takes these columns as strings;
   * the intercept → a ``MinMaxScaler`` of the first numeric column with ``scale_ = 0`` and
     ``min_ = 1``: the constant 1;

2. the row-norm step. With an intercept coordinate equal to 1 every row has ‖x‖ ≥ 1, so
   PrivFit's ``clip`` (x / max(1, ‖x‖)) is exactly ``Normalizer(norm="l2")``; ``scale``
   (x / M with the public M) is folded into the weights, w ↦ w / M;

3. the model, by the label's task:

   * **binary**: ``LogisticRegression`` with PrivFit's weights, no separate intercept and
     classes −1/+1 (+1 is the label's positive value): ``decision_function`` is PrivFit's
     score, ``predict`` its class (score > 0), ``predict_proba`` σ(score) (a probability only
     for the logistic loss);
   * **multi-class**: ``LogisticRegression`` with ``coef_`` the (K, d) weights, zero
     ``intercept_`` and ``classes_`` the declared classes as text, in declared order (not
     sorted): scikit-learn's multinomial rule (lbfgs, K ≥ 3) makes ``decision_function`` the K
     scores, ``predict`` ``classes_[argmax]`` (numpy's argmax: the first class on a tie, as
     PrivFit) and ``predict_proba`` their softmax;
   * **regression**: three standard steps, because a scikit-learn ``Pipeline`` can only
     transform *before* its final estimator and PrivFit clips the predicted value. With the
     label's public bounds [L, U], h = (U − L)/2 and c = L + h:
     ``TruncatedSVD`` holding w as its one component (its ``transform`` is x ↦ xwᵀ: the
     score s), ``MinMaxScaler(feature_range=(L, U), clip=True)`` with ``scale_ = h`` and
     ``min_ = c`` (s ↦ clip(h·s + c, L, U), which equals PrivFit's
     L + (clip(s, −1, 1) + 1)/2 · (U − L) since the map is increasing and sends ±1 to U and L),
     then ``LinearRegression`` with coefficient 1 and intercept 0, so that ``predict`` returns
     that value. Every value is within [L, U] exactly (the clip is the last arithmetic step;
     ONNX clips in float32). ``named_steps["score"].components_[0]`` holds w in the label's
     [−1, 1] units; the slope in the label's units is h·w.

What standard steps cannot express is refused (422 from the route): models that are not a
single weight vector (stacked models), a random projection, ``clip`` without an intercept, or
a spec without a numeric column to carry the intercept. The JSON export covers those.

Both files carry the privacy record: the skops archive as the pipeline's
``privfit_metadata_`` attribute (plain JSON text, a trusted type), the ONNX model in its
``metadata_props`` (``privfit.privacy``, ``privfit.model_id``, …). Neither uses pickle.
scikit-learn, skops and skl2onnx are imported lazily.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["StandardExportError", "sklearn_pipeline", "to_onnx", "to_skops"]

#: The ONNX output of a regression export: the predicted value, float32 [N, 1].
ONNX_VALUE_OUTPUT = "value"


class StandardExportError(ValueError):
    """The model cannot be expressed with standard scikit-learn steps."""


def _metadata(doc: Mapping[str, Any]) -> dict[str, str]:
    return {
        "privfit.format": f"{doc['format']}/{doc['format_version']}",
        "privfit.model_id": str(doc["model_id"]),
        "privfit.mechanism": str(doc.get("mechanism")),
        "privfit.loss": str(doc.get("loss")),
        "privfit.task": str(doc.get("task", "binary")),
        "privfit.label": json.dumps(doc.get("label")),
        "privfit.classes": json.dumps(doc.get("classes")),
        "privfit.feature_names": json.dumps(doc["feature_names"]),
        "privfit.privacy": json.dumps(doc["privacy"], sort_keys=True),
        "privfit.decision_rule": str(doc["decision_rule"]),
    }


def _check_expressible(doc: Mapping[str, Any]) -> None:
    spec = doc["preprocessing"]
    if doc.get("weights") is None:
        raise StandardExportError(
            "only linear models (one weight vector) export to scikit-learn or ONNX; "
            "use format=json for this model"
        )
    if doc.get("projection_matrix") is not None:
        raise StandardExportError(
            "a model over a random projection has no standard scikit-learn pipeline; "
            "use format=json"
        )
    if not spec["intercept"] and spec["row_norm"] == "clip":
        raise StandardExportError(
            "row_norm 'clip' without an intercept is not a standard scikit-learn step; "
            "use format=json"
        )
    if not any(f["type"] == "numeric" for f in spec["features"]):
        raise StandardExportError(
            "the pipeline needs a numeric column to carry the intercept; use format=json"
        )


def sklearn_pipeline(doc: Mapping[str, Any]) -> Any:
    """The fitted ``Pipeline`` of an export document (see the module docstring)."""
    _check_expressible(doc)
    import pandas as pd
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import Normalizer, OneHotEncoder

    spec = doc["preprocessing"]
    features = spec["features"]
    transformers: list[tuple[str, Any, list[str]]] = []
    for k, feature in enumerate(features):
        column = feature["column"]
        if feature["type"] == "numeric":
            lower, upper = float(feature["lower"]), float(feature["upper"])
            scaler = _scaler(1.0 / (upper - lower), -lower / (upper - lower), column)
            transformers.append((f"f{k}", scaler, [column]))
        else:
            categories = [str(c) for c in feature["categories"]]
            encoder = OneHotEncoder(
                categories=[categories], handle_unknown="ignore", sparse_output=False
            )
            encoder.fit(pd.DataFrame({column: categories}))
            transformers.append((f"f{k}", encoder, [column]))
    if spec["intercept"]:
        first_numeric = next(f["column"] for f in features if f["type"] == "numeric")
        transformers.append(("intercept", _scaler(0.0, 1.0, first_numeric), [first_numeric]))
    columns = ColumnTransformer(transformers, remainder="drop", sparse_threshold=0.0)
    _mark_fitted(columns, transformers, [f["column"] for f in features])

    coef = np.asarray(doc["weights"]["coef"], dtype=np.float64)
    steps: list[tuple[str, Any]] = [("preprocess", columns)]
    width = coef.shape[-1]
    if spec["row_norm"] == "clip":
        steps.append(("row_norm", Normalizer(norm="l2").fit(np.zeros((1, width)))))
    else:
        coef = coef / math.sqrt(len(features) + (1 if spec["intercept"] else 0))
    task = doc.get("task", "binary")
    if task == "regression":
        steps += _regression_steps(doc, coef)
    else:
        model = LogisticRegression(fit_intercept=False)
        if task == "multiclass":
            model.coef_ = coef
            model.classes_ = np.asarray([str(c) for c in doc["classes"]])
        else:
            model.coef_ = coef.reshape(1, -1)
            model.classes_ = np.array([-1, 1])
        model.intercept_ = np.zeros(model.coef_.shape[0])
        model.n_features_in_ = width
        steps.append(("linear", model))
    pipeline = Pipeline(steps)
    pipeline.privfit_metadata_ = json.dumps(_metadata(doc), sort_keys=True)
    return pipeline


def _regression_steps(doc: Mapping[str, Any], coef: np.ndarray) -> list[tuple[str, Any]]:
    """score (TruncatedSVD: x ↦ xwᵀ) → value (MinMaxScaler: clip(h·s + c, L, U)) → output
    (LinearRegression: the identity), see the module docstring."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.linear_model import LinearRegression

    from service.domain.models.export import regression_map

    lower, upper, half, center = regression_map(doc)
    score = TruncatedSVD(n_components=1)
    score.components_ = coef.reshape(1, -1)
    score.n_features_in_ = coef.size
    value = _scaler(half, center, None, feature_range=(lower, upper))
    output = LinearRegression()
    output.coef_ = np.ones(1)
    output.intercept_ = 0.0
    output.n_features_in_ = 1
    return [("score", score), ("value", value), ("output", output)]


def _scaler(
    scale: float,
    offset: float,
    column: str | None,
    feature_range: tuple[float, float] = (0.0, 1.0),
) -> Any:
    """A fitted ``MinMaxScaler(clip=True)``: v ↦ clip(scale·v + offset, *feature_range), over
    the named raw column (or, with ``column=None``, over an unnamed array column)."""
    import pandas as pd
    from sklearn.preprocessing import MinMaxScaler

    scaler = MinMaxScaler(feature_range=feature_range, clip=True)
    sample = np.array([[0.0], [1.0]])
    scaler.fit(sample if column is None else pd.DataFrame({column: sample[:, 0]}))
    scaler.scale_ = np.array([scale])
    scaler.min_ = np.array([offset])
    if scale > 0:
        low, high = feature_range
        scaler.data_min_ = np.array([(low - offset) / scale])
        scaler.data_max_ = scaler.data_min_ + (high - low) / scale
    scaler.data_range_ = scaler.data_max_ - scaler.data_min_
    return scaler


def _mark_fitted(
    columns: Any, transformers: list[tuple[str, Any, list[str]]], names: list[str]
) -> None:
    """Fit the ColumnTransformer on one harmless row, then put the fixed steps back."""
    import pandas as pd

    sample: dict[str, list[Any]] = {}
    for _, step, (column,) in transformers:
        if hasattr(step, "categories"):
            sample[column] = [str(step.categories[0][0])]
        else:
            sample.setdefault(column, [0.0])
    fixed = {name: step for name, step, _ in transformers}
    columns.fit(pd.DataFrame({name: sample.get(name, [0.0]) for name in names}))
    # the remainder's column list is a private list type in some scikit-learn versions
    # (1.5 to 1.6), which skops does not trust: a plain list says the same.
    columns.transformers_ = [
        (name, fixed.get(name, step), _plain(cols)) for name, step, cols in columns.transformers_
    ]
    remainder = getattr(columns, "_remainder", None)
    if isinstance(remainder, tuple) and len(remainder) == 3:
        columns._remainder = (remainder[0], remainder[1], _plain(remainder[2]))


def _plain(cols: Any) -> Any:
    """A column selection as a plain list (a ``UserList``'s ``data``, read without the
    deprecation warning its items give), or as it is (a name)."""
    if isinstance(cols, str):
        return cols
    return list(getattr(cols, "data", cols))


def to_skops(doc: Mapping[str, Any]) -> bytes:
    """The pipeline as a skops archive (no pickle)."""
    import skops.io

    return bytes(skops.io.dumps(sklearn_pipeline(doc)))


def to_onnx(doc: Mapping[str, Any]) -> bytes:
    """The pipeline as an ONNX model: one input per raw column, in the spec's order (numeric
    columns as float32 ``[N, 1]``, categorical ones as string ``[N, 1]``; the raw column names
    in ``metadata_props["privfit.input_columns"]``); outputs ``label`` and ``probabilities``
    (one column per class, in ``classes_`` order) for classifiers, ``value`` (float32
    ``[N, 1]``, within the label's bounds: the scaler's Clip node is the last arithmetic step)
    for regression; the privacy record in ``metadata_props``."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    pipeline = sklearn_pipeline(doc)
    inputs = [
        (
            f["column"],
            FloatTensorType([None, 1]) if f["type"] == "numeric" else StringTensorType([None, 1]),
        )
        for f in doc["preprocessing"]["features"]
    ]
    if doc.get("task") == "regression":
        model = convert_sklearn(
            pipeline,
            initial_types=inputs,
            target_opset=17,
            final_types=[(ONNX_VALUE_OUTPUT, FloatTensorType([None, 1]))],
        )
    else:
        model = convert_sklearn(
            pipeline,
            initial_types=inputs,
            target_opset=17,
            options={id(pipeline.steps[-1][1]): {"zipmap": False}},
        )
    metadata = _metadata(doc)
    # ONNX input names are sanitised identifiers; this says which raw column each one is.
    metadata["privfit.input_columns"] = json.dumps([name for name, _ in inputs])
    for key, value in metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    return bytes(model.SerializeToString())
