"""The self-contained export document of a model, and its conversion to scikit-learn.

``GET /v1/models/{id}/export`` returns :func:`build_export`'s document: format name and
version, the label's ``task``, the weights with their feature names, the preprocessing spec
(plus the projection matrix when the spec has one, so no PrivFit code is needed to rebuild it),
the label, the decision rule and the privacy record. Everything is plain JSON.

By task (:mod:`service.domain.datasets.labels`):

* ``binary``: ``weights.coef`` has one weight per feature, ``classes`` is [−1, +1];
* ``multiclass``: ``weights.coef`` is K rows of d weights (row k scores the declared class
  ``classes[k]``, scikit-learn's ``coef_`` layout), ``weights.intercept`` K zeros;
* ``regression``: ``weights.coef`` scores s = wᵀx in the label's [−1, 1] units, ``classes``
  is null, and the value is v = L + (clip(s, −1, 1) + 1)/2 · (U − L) with the label's public
  bounds [L, U]. As an affine map of the features before the clip this is
  v = clip((U − L)/2 · wᵀx + (L + (U − L)/2), L, U).

:func:`preprocess` re-implements the spec's transform with numpy alone (numeric columns
clamped to their public bounds and mapped onto [0, 1], categories one-hot against the declared
list, the intercept column, the row-norm step, the optional projection), and
:func:`to_sklearn` returns a fitted-looking scikit-learn estimator: for classifiers (binary or
multinomial) a ``LogisticRegression`` with ``coef_``/``intercept_``/``classes_`` set, so that
``est.decision_function(preprocess(doc, rows))`` equals PrivFit's scores, ``predict`` its class
(the first class on a tie, as PrivFit) and ``predict_proba`` its probabilities; for regression
a ``LinearRegression`` in the label's units, whose prediction clipped to [L, U] is PrivFit's
value. The README carries the same conversion as a standalone snippet. scikit-learn is
imported lazily: the service does not depend on it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.domain.datasets.labels import LabelTask
from service.domain.records.base import json_safe
from service.dp.data.preprocessing import PreprocessingSpec

__all__ = [
    "CLASSES",
    "EXPORT_FORMAT",
    "EXPORT_FORMAT_VERSION",
    "build_export",
    "preprocess",
    "regression_map",
    "to_sklearn",
]

EXPORT_FORMAT = "privfit.model"
EXPORT_FORMAT_VERSION = 1
#: Class labels of an exported binary classifier: −1 (negative) and +1 (the positive value).
CLASSES = (-1, 1)

_PREPROCESS_RULE = (
    "x = preprocess(row) per 'preprocessing' (then x ↦ R x and a clip to norm ≤ 1 when "
    "'projection_matrix' is given); "
)
_DECISION_RULES: dict[str, str] = {
    "binary": _PREPROCESS_RULE
    + "score = Σ_j weights.coef[j]·x[j] + weights.intercept; the row is positive (class +1, "
    "the label's positive value) when score > 0; for the logistic loss, "
    "P(positive) = 1/(1 + exp(−score))",
    "multiclass": _PREPROCESS_RULE
    + "scores[k] = Σ_j weights.coef[k][j]·x[j] + weights.intercept[k] for each declared class "
    "classes[k]; the predicted class is the class of the largest score (the first on a tie); "
    "P(classes[k]) = exp(scores[k]) / Σ_i exp(scores[i]) (softmax)",
    "regression": _PREPROCESS_RULE
    + "score = Σ_j weights.coef[j]·x[j] + weights.intercept (in the label's [−1, 1] units); "
    "value = label.lower + (clip(score, −1, 1) + 1)/2 · (label.upper − label.lower), "
    "always within [label.lower, label.upper]",
}


def _weights(
    body: Mapping[str, Any], feature_names: Sequence[str], task: LabelTask
) -> dict[str, Any] | None:
    """The weights member: one vector (binary, regression) or one row per class."""
    kind = body.get("kind")
    if kind == "linear" and task.task != "multiclass":
        coef = [float(v) for v in body["coef"]]
        if len(coef) != len(feature_names):
            raise ValueError("the model's weights do not match its feature names")
        return {"coef": coef, "intercept": 0.0}
    if kind == "multiclass" and task.task == "multiclass":
        rows = [[float(v) for v in row] for row in body["coef"]]
        if len(rows) != len(task.classes):
            raise ValueError("the model's weights do not have one row per declared class")
        if any(len(row) != len(feature_names) for row in rows):
            raise ValueError("the model's weights do not match its feature names")
        return {"coef": rows, "intercept": [0.0] * len(rows)}
    if kind in ("linear", "multiclass"):
        raise ValueError("the model's weights do not match its label's task")
    return None


def build_export(
    *,
    model_id: str,
    source: str,
    mechanism: str | None,
    loss: str | None,
    feature_names: Sequence[str],
    preprocessing: Mapping[str, Any],
    body: Mapping[str, Any],
    privacy: Mapping[str, Any],
    label: Mapping[str, Any] | None,
    created_at: datetime | None,
) -> dict[str, Any]:
    """The export document of one model (see the module docstring).

    ``weights`` is given for linear models (``body["kind"]`` ``"linear"``, or
    ``"multiclass"`` for a multi-class label); any other model is still exported through
    ``model`` (its ``to_dict()``), but has no scikit-learn equivalent.
    """
    spec = PreprocessingSpec.from_dict(preprocessing)
    task = LabelTask.from_label(label)
    weights = _weights(body, feature_names, task)
    classes: list[Any] | None
    if task.task == "multiclass":
        classes = list(task.classes)
    elif task.task == "regression":
        classes = None
    else:
        classes = list(CLASSES)
    projection = spec.projection
    return {
        "format": EXPORT_FORMAT,
        "format_version": EXPORT_FORMAT_VERSION,
        "model_id": model_id,
        "created_at": None if created_at is None else created_at.isoformat(),
        "source": source,
        "mechanism": mechanism,
        "loss": loss,
        "task": task.task,
        "label": None if label is None else dict(label),
        "classes": classes,
        "feature_names": list(feature_names),
        "weights": weights,
        "model": json_safe(dict(body)),
        "preprocessing": spec.to_dict(),
        "projection_matrix": None if projection is None else projection.matrix.tolist(),
        "decision_rule": _DECISION_RULES[task.task],
        "privacy": json_safe(dict(privacy)),
    }


def regression_map(doc: Mapping[str, Any]) -> tuple[float, float, float, float]:
    """(L, U, h, c) of a regression export: the label's bounds, h = (U − L)/2 and
    c = L + h, so that the value of a score s is clip(h·s + c, L, U)."""
    label = doc.get("label") or {}
    lower, upper = float(label["lower"]), float(label["upper"])
    half = (upper - lower) / 2.0
    return lower, upper, half, lower + half


def _clip_rows(X: NDArray[np.float64]) -> NDArray[np.float64]:
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    out: NDArray[np.float64] = X / np.maximum(norms, 1.0)[:, None]
    return out


def _category_text(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def preprocess(doc: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> NDArray[np.float64]:
    """The design matrix of ``rows`` under the document's preprocessing, with numpy only."""
    spec = doc["preprocessing"]
    features = spec["features"]
    width = sum(1 if f["type"] == "numeric" else len(f["categories"]) for f in features)
    width += 1 if spec["intercept"] else 0
    X = np.zeros((len(rows), width), dtype=np.float64)
    for i, row in enumerate(rows):
        j = 0
        for f in features:
            value = row[f["column"]]
            if f["type"] == "numeric":
                lower, upper = float(f["lower"]), float(f["upper"])
                X[i, j] = (min(max(float(value), lower), upper) - lower) / (upper - lower)
                j += 1
            else:
                cats = list(f["categories"])
                text = _category_text(value)
                if text in cats:
                    X[i, j + cats.index(text)] = 1.0
                j += len(cats)
        if spec["intercept"]:
            X[i, j] = 1.0
    if spec["row_norm"] == "scale":
        X /= math.sqrt(len(features) + (1 if spec["intercept"] else 0))
    X = _clip_rows(X)
    matrix = doc.get("projection_matrix")
    if matrix is not None:
        X = _clip_rows(X @ np.asarray(matrix, dtype=np.float64).T)
    return X


def to_sklearn(doc: Mapping[str, Any]) -> Any:
    """A scikit-learn estimator scoring preprocessed rows like PrivFit (module docstring).

    Binary: ``LogisticRegression`` with classes −1/+1 (+1 is the label's positive value);
    ``predict_proba`` is meaningful only for the logistic loss. Multi-class:
    ``LogisticRegression`` with ``coef_`` (K, d), zero ``intercept_`` and the declared classes
    (text) in their declared order, multinomial: ``decision_function`` gives the K scores,
    ``predict`` the class of the largest (the first on a tie: numpy's argmax, as PrivFit),
    ``predict_proba`` their softmax. Regression: ``LinearRegression`` with the weights in the
    label's units, coef·(U − L)/2 and intercept L + (U − L)/2; PrivFit's value is
    ``np.clip(est.predict(X), L, U)``. Raises ``ValueError`` for models that are not linear.
    """
    if doc.get("format") != EXPORT_FORMAT or doc.get("format_version") != EXPORT_FORMAT_VERSION:
        raise ValueError("not a PrivFit model export of a supported version")
    weights = doc.get("weights")
    if weights is None:
        raise ValueError("only linear models have a scikit-learn equivalent")
    task = doc.get("task", "binary")
    if task == "regression":
        from sklearn.linear_model import LinearRegression

        _, _, half, center = regression_map(doc)
        coef = np.asarray(weights["coef"], dtype=np.float64)
        regressor = LinearRegression(fit_intercept=True)
        regressor.coef_ = coef * half
        regressor.intercept_ = center + half * float(weights["intercept"])
        regressor.n_features_in_ = coef.size
        return regressor
    from sklearn.linear_model import LogisticRegression

    if task == "multiclass":
        matrix = np.asarray(weights["coef"], dtype=np.float64)
        classes = np.asarray([str(c) for c in doc["classes"]])
    else:
        matrix = np.asarray(weights["coef"], dtype=np.float64).reshape(1, -1)
        classes = np.array(CLASSES)
    estimator = LogisticRegression(fit_intercept=False)
    estimator.coef_ = matrix
    estimator.intercept_ = np.asarray(weights["intercept"], dtype=np.float64).reshape(-1)
    estimator.classes_ = classes
    estimator.n_features_in_ = matrix.shape[1]
    return estimator
