"""Predictions as table rows, by the model's task (what ``predict`` on a DataFrame and the
command line's ``predict`` write).

* binary: ``positive``, ``score``, ``probability`` (as before);
* multi-class: ``predicted_class``, then ``probability[c]`` for each declared class ``c``,
  in the label's order (the softmax of the class scores);
* regression: ``value`` (within the label's public bounds) and ``score`` (in [−1, 1] units).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from privfit_client.models import ModelRead, PredictionRead

__all__ = ["BINARY_COLUMNS", "prediction_cells", "prediction_columns", "probability_column"]

#: The columns of a binary model's predictions.
BINARY_COLUMNS: tuple[str, ...] = ("positive", "score", "probability")


def probability_column(name: str) -> str:
    """The column of one class's probability: ``probability[<class>]``."""
    return f"probability[{name}]"


def _classes(model: ModelRead) -> Sequence[str]:
    classes = model.label.classes if model.label is not None else None
    return list(classes or [])


def prediction_columns(model: ModelRead) -> list[str]:
    """The columns a prediction of ``model`` fills, in order."""
    if model.task == "multiclass":
        return ["predicted_class", *(probability_column(c) for c in _classes(model))]
    if model.task == "regression":
        return ["value", "score"]
    return list(BINARY_COLUMNS)


def prediction_cells(model: ModelRead, prediction: PredictionRead) -> dict[str, Any]:
    """One prediction of ``model`` as ``{column: value}`` (see :func:`prediction_columns`)."""
    if model.task == "multiclass":
        classes = _classes(model)
        probabilities = list(prediction.probabilities or [])
        if len(probabilities) != len(classes):
            raise ValueError("the prediction does not have one probability per declared class")
        return {
            "predicted_class": prediction.predicted_class,
            **{probability_column(c): p for c, p in zip(classes, probabilities, strict=True)},
        }
    if model.task == "regression":
        return {"value": prediction.value, "score": prediction.score}
    return {name: getattr(prediction, name) for name in BINARY_COLUMNS}
