"""Scoring raw rows with a stored model (issue 4 item 4). Pure: no database, no HTTP.

Rows arrive as JSON objects keyed by the raw column names of the model's preprocessing spec.
Each row is checked first, so that a bad value is reported with its row index and column
(never its value); then the rows go through the same public transform the model was trained
with (:meth:`PreprocessingSpec.transform`), the model's decision function gives the score, the
sign of the score the class, and for the logistic loss σ(score) the probability of the
positive class. Columns the spec does not read (an ID, the label) are ignored.

By the model's label (:mod:`service.domain.datasets.labels`): a **multi-class** model gives K
scores s_k = w_kᵀx, the predicted class is the declared class of the largest score (the first
on a tie) and the probabilities are softmax(s)_k = exp(s_k − max s)/Σ_j exp(s_j − max s); a
**regression** model's score s (in the label's [−1, 1] units) maps back to
L + (clip(s, −1, 1) + 1)/2 · (U − L), always within the public bounds [L, U].

Every value returned is finite, whatever the stored weights: a linear score is computed as
s·((w/s)ᵀx) with s = max|wᵢ| (so huge weights cannot overflow into inf − inf), any score is
clipped to ±:data:`MAX_ABS_SCORE` (a score that still cannot be computed, which only a model
with non-finite parts could give, is 0: not positive), and σ is scipy's ``expit``, which is
exact at both ends (σ(±MAX_ABS_SCORE) is 1 or 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit, softmax

from service.domain.datasets.labels import LabelTask
from service.dp import FittedModel, LinearModel
from service.dp.data.preprocessing import CategoricalFeature, NumericFeature, PreprocessingSpec

__all__ = [
    "MAX_ABS_SCORE",
    "MAX_REPORTED_ROW_ERRORS",
    "InvalidRowsError",
    "Prediction",
    "RowError",
    "predict_rows",
    "rows_to_columns",
]

#: At most this many bad cells are listed in one error.
MAX_REPORTED_ROW_ERRORS = 20
#: Scores are clipped to [−MAX_ABS_SCORE, MAX_ABS_SCORE]; a sane model (rows have norm ≤ 1)
#: never comes near it, and beyond it σ(score) is 0 or 1 in float64 anyway.
MAX_ABS_SCORE = 1e12


@dataclass(frozen=True, slots=True)
class RowError:
    """One bad cell: row index (0-based, in request order), column and what is wrong."""

    row: int
    column: str
    reason: str

    def __str__(self) -> str:
        return f"row {self.row}, column {self.column!r}: {self.reason}"


class InvalidRowsError(ValueError):
    """Some rows cannot be scored; ``errors`` lists the first bad cells."""

    def __init__(self, errors: Sequence[RowError], total: int) -> None:
        self.errors = list(errors)
        self.total = total
        more = f" (and {total - len(self.errors)} more)" if total > len(self.errors) else ""
        super().__init__("; ".join(str(e) for e in self.errors) + more)


@dataclass(frozen=True, slots=True)
class Prediction:
    """Binary: the class (positive = score > 0), the score wᵀx and, for the logistic loss,
    σ(wᵀx). Multi-class: the predicted class (its declared text), the K scores and their
    softmax. Regression: the score and the predicted value within the label's bounds."""

    positive: bool | None
    score: float | None
    probability: float | None
    predicted_class: str | None = None
    scores: list[float] | None = None
    probabilities: list[float] | None = None
    value: float | None = None


def _numeric_cell(value: object) -> tuple[float | None, str | None]:
    if value is None:
        return None, "missing value"
    if isinstance(value, bool):
        return None, "expected a number, got a boolean"
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            return None, "missing value"
        try:
            number = float(text)
        except ValueError:
            return None, "expected a number"
    else:
        return None, "expected a number"
    if not math.isfinite(number):
        return None, "expected a finite number"
    return number, None


def _category_cell(value: object) -> tuple[str | None, str | None]:
    if value is None:
        return None, "missing value"
    if isinstance(value, bool):
        return None, "expected a category, got a boolean"
    if isinstance(value, str):
        text = value
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, float) and value.is_integer():
        text = str(int(value))
    else:
        return None, "expected a category"
    if text == "":
        return None, "missing value"
    # A category outside the declared list maps to an all-zero block, exactly as in training.
    return text, None


def rows_to_columns(
    spec: PreprocessingSpec, rows: Sequence[Mapping[str, Any]]
) -> dict[str, NDArray[Any]]:
    """The spec's input columns as arrays; raises :class:`InvalidRowsError` for any missing or
    invalid cell (numbers must be finite, categories must be text; an undeclared category
    is an all-zero block, as in training), listing the first bad
    cells in row order."""
    errors: list[RowError] = []
    total = 0
    numeric = {
        f.column: np.empty(len(rows), dtype=np.float64)
        for f in spec.features
        if isinstance(f, NumericFeature)
    }
    categorical = {
        f.column: [f.categories[0]] * len(rows)
        for f in spec.features
        if isinstance(f, CategoricalFeature)
    }
    order = spec.columns
    for i, row in enumerate(rows):
        for col in order:
            problem: str | None
            if col in numeric:
                number, problem = _numeric_cell(row.get(col))
                if number is not None:
                    numeric[col][i] = number
            else:
                texts = categorical[col]
                text, problem = _category_cell(row.get(col))
                if text is not None:
                    texts[i] = text
            if problem is not None:
                total += 1
                if len(errors) < MAX_REPORTED_ROW_ERRORS:
                    errors.append(RowError(i, col, problem))
    if total:
        raise InvalidRowsError(errors, total)
    columns: dict[str, NDArray[Any]] = dict(numeric)
    for col, texts in categorical.items():
        columns[col] = np.asarray(texts, dtype=str)
    return columns


def _scores(model: FittedModel, X: NDArray[np.float64]) -> NDArray[np.float64]:
    """The model's scores of ``X``, finite and within ±:data:`MAX_ABS_SCORE`."""
    with np.errstate(over="ignore", invalid="ignore"):
        if isinstance(model, LinearModel):
            coef = np.asarray(model.coef, dtype=np.float64)
            scale = float(np.max(np.abs(coef))) if coef.size else 0.0
            if math.isfinite(scale) and scale > 1.0:
                raw = (np.asarray(X, dtype=np.float64) @ (coef / scale)) * scale
            else:
                raw = np.asarray(model.decision_function(X), dtype=np.float64)
        else:
            raw = np.asarray(model.decision_function(X), dtype=np.float64)
        raw = raw.reshape(-1)
    scores = np.clip(np.nan_to_num(raw, nan=0.0), -MAX_ABS_SCORE, MAX_ABS_SCORE)
    return np.asarray(scores, dtype=np.float64)


def _class_scores(model: FittedModel, X: NDArray[np.float64], k: int) -> NDArray[np.float64]:
    """A multi-class model's (n, K) scores, finite and within ±:data:`MAX_ABS_SCORE`."""
    with np.errstate(over="ignore", invalid="ignore"):
        raw = np.asarray(model.decision_function(X), dtype=np.float64)
    if raw.ndim != 2 or raw.shape != (X.shape[0], k):
        raise ValueError("the model's scores do not have one column per declared class")
    finite = np.nan_to_num(raw, nan=0.0, posinf=MAX_ABS_SCORE, neginf=-MAX_ABS_SCORE)
    return np.asarray(np.clip(finite, -MAX_ABS_SCORE, MAX_ABS_SCORE), dtype=np.float64)


def _multiclass(
    model: FittedModel, X: NDArray[np.float64], classes: Sequence[str]
) -> list[Prediction]:
    scores = _class_scores(model, X, len(classes))
    probabilities = softmax(scores, axis=1)
    best = np.argmax(scores, axis=1)
    return [
        Prediction(
            positive=None,
            score=None,
            probability=None,
            predicted_class=classes[int(best[i])],
            scores=[float(v) for v in scores[i]],
            probabilities=[float(v) for v in probabilities[i]],
        )
        for i in range(X.shape[0])
    ]


def predict_rows(
    model: FittedModel,
    spec: PreprocessingSpec,
    rows: Sequence[Mapping[str, Any]],
    *,
    loss: str | None,
    labels: LabelTask | None = None,
) -> list[Prediction]:
    """Score ``rows`` (see the module docstring). ``loss`` decides whether a probability is
    given: only the logistic loss makes σ(score) a probability. ``labels`` is the model's
    label (binary when None)."""
    if not rows:
        return []
    task = labels or LabelTask("binary")
    X = spec.transform(rows_to_columns(spec, rows))
    if task.task == "multiclass":
        return _multiclass(model, X, task.classes)
    scores = _scores(model, X)
    if task.task == "regression":
        values = task.from_unit(scores)
        return [
            Prediction(positive=None, score=float(s), probability=None, value=float(v))
            for s, v in zip(scores, values, strict=True)
        ]
    if scores.shape[0] != len(rows):
        raise ValueError("the model returned a score count that does not match the rows")
    probabilities = expit(scores) if loss == "logistic" else None
    return [
        Prediction(
            positive=bool(scores[i] > 0.0),
            score=float(scores[i]),
            probability=None if probabilities is None else float(probabilities[i]),
        )
        for i in range(len(rows))
    ]
