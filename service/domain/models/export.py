"""The self-contained export document of a model, and its conversion to scikit-learn.

``GET /v1/models/{id}/export`` returns :func:`build_export`'s document: format name and
version, the weights with their feature names, the preprocessing spec (plus the projection
matrix when the spec has one, so no PrivFit code is needed to rebuild it), the label, the
decision rule and the privacy record. Everything is plain JSON.

:func:`preprocess` re-implements the spec's transform with numpy alone (numeric columns
clamped to their public bounds and mapped onto [0, 1], categories one-hot against the declared
list, the intercept column, the row-norm step, the optional projection), and
:func:`to_sklearn` returns a fitted-looking ``sklearn.linear_model.LogisticRegression`` with
``coef_``/``intercept_``/``classes_`` set, so that
``est.decision_function(preprocess(doc, rows))`` equals PrivFit's scores. The README carries
the same conversion as a standalone snippet. scikit-learn is imported lazily: the service does
not depend on it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.domain.records.base import json_safe
from service.dp.data.preprocessing import PreprocessingSpec

__all__ = [
    "CLASSES",
    "EXPORT_FORMAT",
    "EXPORT_FORMAT_VERSION",
    "build_export",
    "preprocess",
    "to_sklearn",
]

EXPORT_FORMAT = "privfit.model"
EXPORT_FORMAT_VERSION = 1
#: Class labels of an exported classifier: −1 (negative) and +1 (the label's positive value).
CLASSES = (-1, 1)

_DECISION_RULE = (
    "x = preprocess(row) per 'preprocessing' (then x ↦ R x and a clip to norm ≤ 1 when "
    "'projection_matrix' is given); score = Σ_j weights.coef[j]·x[j] + weights.intercept; "
    "the row is positive (class +1, the label's positive value) when score > 0; for the "
    "logistic loss, P(positive) = 1/(1 + exp(−score))"
)


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

    ``weights`` is given for linear models (``body["kind"] == "linear"``); any other model is
    still exported through ``model`` (its ``to_dict()``), but has no scikit-learn equivalent.
    """
    spec = PreprocessingSpec.from_dict(preprocessing)
    weights: dict[str, Any] | None = None
    if body.get("kind") == "linear":
        coef = [float(v) for v in body["coef"]]
        if len(coef) != len(feature_names):
            raise ValueError("the model's weights do not match its feature names")
        weights = {"coef": coef, "intercept": 0.0}
    projection = spec.projection
    return {
        "format": EXPORT_FORMAT,
        "format_version": EXPORT_FORMAT_VERSION,
        "model_id": model_id,
        "created_at": None if created_at is None else created_at.isoformat(),
        "source": source,
        "mechanism": mechanism,
        "loss": loss,
        "label": None if label is None else dict(label),
        "classes": list(CLASSES),
        "feature_names": list(feature_names),
        "weights": weights,
        "model": json_safe(dict(body)),
        "preprocessing": spec.to_dict(),
        "projection_matrix": None if projection is None else projection.matrix.tolist(),
        "decision_rule": _DECISION_RULE,
        "privacy": json_safe(dict(privacy)),
    }


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
    """A ``sklearn.linear_model.LogisticRegression`` scoring preprocessed rows like PrivFit.

    Classes are −1/+1 (+1 is the label's positive value). ``predict_proba`` is meaningful
    only for the logistic loss. Raises ``ValueError`` for models that are not linear.
    """
    if doc.get("format") != EXPORT_FORMAT or doc.get("format_version") != EXPORT_FORMAT_VERSION:
        raise ValueError("not a PrivFit model export of a supported version")
    weights = doc.get("weights")
    if weights is None:
        raise ValueError("only linear models have a scikit-learn equivalent")
    from sklearn.linear_model import LogisticRegression

    coef = np.asarray(weights["coef"], dtype=np.float64).reshape(1, -1)
    estimator = LogisticRegression(fit_intercept=False)
    estimator.coef_ = coef
    estimator.intercept_ = np.array([float(weights["intercept"])])
    estimator.classes_ = np.array(CLASSES)
    estimator.n_features_in_ = coef.shape[1]
    return estimator
