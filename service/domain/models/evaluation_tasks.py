"""A private evaluation by the label's task (issue 29): what each task releases, how its ε is
split, and the check that a model's released form predicts that task.

* **binary**: the confusion matrix and the score histograms (ε/2 each,
  :mod:`service.dp.analysis.evaluation`);
* **multiclass**: the K × K confusion matrix with the whole ε, the classes named in the label's
  declared order (:mod:`service.dp.analysis.evaluation_multiclass`);
* **regression**: seven noisy sums of residual and label terms in the label's [−1, 1] units,
  RMSE and MAE reported in the label's own units from its public bounds
  (:mod:`service.dp.analysis.evaluation_regression`).

Every release is pure ε-DP (δ = 0) with replace-one neighbours on the evaluated dataset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.domain.datasets.labels import LabelTask
from service.domain.errors import InvalidInputError
from service.dp import FittedModel
from service.dp.analysis import evaluation as binary
from service.dp.analysis import evaluation_multiclass as multiclass
from service.dp.analysis import evaluation_regression as regression
from service.dp.analysis.evaluation import RandBelow

__all__ = ["TaskRelease", "check_model_task", "epsilon_split", "release"]


@dataclass(frozen=True, slots=True)
class TaskRelease:
    """A released evaluation: its JSON result, ε split, composition note and the ε it spent."""

    result: dict[str, Any]
    epsilon_split: dict[str, float]
    note: Mapping[str, str]
    spent: float


def epsilon_split(labels: LabelTask, epsilon: float) -> dict[str, float]:
    """How a request's ε would be divided between the task's releases (for a quote)."""
    if labels.task == "multiclass":
        return {"confusion_matrix": float(epsilon)}
    if labels.task == "regression":
        return {s.name: float(s.share * Fraction(epsilon)) for s in regression.STATISTICS}
    return {"confusion_matrix": epsilon / 2, "roc_histogram": epsilon - epsilon / 2}


def check_model_task(body: Mapping[str, Any], labels: LabelTask) -> None:
    """422 unless the model's stored form predicts its label's task: K score rows for a
    multi-class label, one linear score for a numeric one (checked before anything is
    charged, so a run cannot fail on the shape of the scores)."""
    kind = body.get("kind")
    if labels.task == "multiclass":
        coef = body.get("coef")
        fits = kind == "multiclass" and isinstance(coef, list) and len(coef) == labels.n_classes
    elif labels.task == "regression":
        fits = kind == "linear"
    else:
        fits = kind != "multiclass"
    if not fits:
        msg = f"the model does not predict {labels.describe()}, the label it is evaluated on"
        raise InvalidInputError(msg, errors=[{"loc": ["path", "model_id"], "msg": msg}])


def release(
    fitted: FittedModel,
    X: NDArray[np.float64],
    y: NDArray[np.float64],
    *,
    labels: LabelTask,
    epsilon: float,
    bins: int,
    randbelow: RandBelow | None,
    bootstrap_rng: np.random.Generator,
) -> TaskRelease:
    """Score ``X`` with the model and release the task's ε-DP evaluation against ``y`` (the
    DP core's encoding of the label)."""
    kwargs: dict[str, Any] = {} if randbelow is None else {"randbelow": randbelow}
    scores = np.asarray(fitted.decision_function(X), dtype=np.float64)
    if labels.task == "multiclass":
        mc = multiclass.evaluate_multiclass(
            scores,
            y,
            epsilon=epsilon,
            classes=labels.classes,
            bootstrap_rng=bootstrap_rng,
            **kwargs,
        )
        return TaskRelease(
            result=mc.to_dict(),
            epsilon_split=mc.epsilon_split,
            note=multiclass.epsilon_split_note(),
            spent=mc.epsilon_split["confusion_matrix"],
        )
    if labels.task == "regression":
        if labels.lower is None or labels.upper is None:
            raise ValueError("a numeric label needs its bounds")
        rg = regression.evaluate_regression(
            scores,
            y,
            epsilon=epsilon,
            lower=labels.lower,
            upper=labels.upper,
            bootstrap_rng=bootstrap_rng,
            **kwargs,
        )
        return TaskRelease(
            result=rg.to_dict(),
            epsilon_split=rg.epsilon_split,
            note=regression.epsilon_split_note(),
            spent=rg.calibrated_epsilon,
        )
    bn = binary.evaluate(
        scores, y, epsilon=epsilon, bins=bins, bootstrap_rng=bootstrap_rng, **kwargs
    )
    return TaskRelease(
        result=bn.to_dict(),
        epsilon_split=bn.epsilon_split,
        note=binary.epsilon_split_note(),
        spent=float(sum(bn.epsilon_split.values())),
    )
