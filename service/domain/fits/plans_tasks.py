"""The planner on multi-class and numeric labels (issue 29): what differs from binary plans.

* λ ``"auto"`` in ``regularizations`` is the task's rule
  (:mod:`service.dp.analysis.regularization_tasks`), recorded on the point.
* Noise and the excess-risk bound come from the task's calibration (noise in ℝ^{dK} for a
  multi-class model).
* Simulation on a public reference (same spec, hence the same label): a multi-class point
  shows ``simulated_accuracy`` (argmax of the K scores) against the reference's
  majority-class frequency; a numeric label's point shows ``simulated_rmse`` in the label's
  own units (the RMSE of the clipped prediction in [−1, 1] units times (U − L)/2) and has no
  majority baseline.
* ``target_accuracy`` needs an accuracy: it is a 422 on a numeric label (a target RMSE is not
  offered).
* ``mechanism: "auto"``: per ε, auto's rule for the task (:mod:`service.dp.analysis.auto_tasks`,
  a function of public quantities, as a fit would choose) with its λ, noise and bound; no
  simulated band (auto on these tasks simulates nothing), and the notes say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.db.models import Dataset
from service.domain.datasets.labels import LabelTask
from service.domain.errors import InvalidInputError
from service.domain.fits import auto as fit_auto
from service.domain.ranges import MAX_REGULARIZATION, MIN_REGULARIZATION
from service.dp.analysis.auto_tasks import RULE, rank_for_task
from service.dp.analysis.planning import GridPoint, plan_point
from service.dp.analysis.regularization_tasks import auto_regularization_task, task_record

__all__ = [
    "MAX_TASK_AUTO_EPSILONS",
    "check_plan_target",
    "plan_regularization",
    "task_auto_plan",
    "task_majority",
    "with_simulation",
]

#: At most this many ε per ``auto`` plan (as for binary plans).
MAX_TASK_AUTO_EPSILONS = 8


def _invalid(msg: str, loc: list[str | int]) -> InvalidInputError:
    return InvalidInputError(msg, errors=[{"loc": loc, "msg": msg}])


def plan_regularization(
    request: Any, *, n: int, d: int, epsilon: float, task: LabelTask
) -> tuple[float, Mapping[str, Any]]:
    """λ ``"auto"`` of a plan's mechanism at ``epsilon`` and its record (422 without a rule)."""
    try:
        choice = auto_regularization_task(
            request.mechanism,
            task=task.task,
            n_classes=task.n_classes,
            n=n,
            d=d,
            epsilon=epsilon,
            delta=request.delta,
            loss=request.loss,
            params=request.params,
            bounds=(MIN_REGULARIZATION, MAX_REGULARIZATION),
        )
    except ValueError as exc:
        raise _invalid(f"regularization 'auto': {exc}", ["body", "regularizations"]) from exc
    return choice.regularization, task_record(choice)


def check_plan_target(request: Any, task: LabelTask) -> None:
    """A target accuracy on a numeric label is a 422 (no accuracy to reach)."""
    if task.task == "regression" and request.target_accuracy is not None:
        raise _invalid(
            "a numeric label has no accuracy: plan without target_accuracy (the simulated "
            "points show their RMSE)",
            ["body", "target_accuracy"],
        )


def task_majority(y: NDArray[np.float64], task: LabelTask) -> float | None:
    """The public reference's majority-class frequency (binary ±1 or class indices); None
    for a numeric label."""
    if task.task == "regression":
        return None
    if task.task == "multiclass":
        counts = np.bincount(np.asarray(y).astype(np.int64), minlength=task.n_classes)
        return float(counts.max() / max(1, counts.sum()))
    positive = float(np.mean(np.asarray(y) > 0))
    return max(positive, 1.0 - positive)


def with_simulation(point: GridPoint, scores: tuple[float, ...], task: LabelTask) -> GridPoint:
    """``point`` with its simulated scores: accuracies, or RMSEs in the label's units."""
    if task.task != "regression":
        return replace(point, accuracies=scores)
    assert task.lower is not None
    assert task.upper is not None
    half_range = (task.upper - task.lower) / 2.0
    return replace(point, rmses=tuple(float(s) * half_range for s in scores))


def task_auto_plan(
    target: Dataset, request: Any, task: LabelTask
) -> tuple[list[GridPoint], list[str]]:
    """The points and notes of a ``mechanism: auto`` plan on a multi-class or numeric label."""
    epsilons = sorted(set(request.epsilons))
    if len(epsilons) > MAX_TASK_AUTO_EPSILONS:
        raise _invalid(f"at most {MAX_TASK_AUTO_EPSILONS} ε values with auto", ["body", "epsilons"])
    if request.target_accuracy is not None:
        raise _invalid(
            "auto plans answer no target accuracy; name a mechanism", ["body", "target_accuracy"]
        )
    fit_auto.check_auto_request(epsilon=epsilons[0], params=request.params)
    n, d = int(target.n_rows), int(target.n_features)
    points: list[GridPoint] = []
    for eps in epsilons:
        try:
            choice = rank_for_task(
                task.task,
                n_classes=task.n_classes,
                n=n,
                d=d,
                epsilon=float(eps),
                delta=float(request.delta),
                loss=request.loss if request.loss_given else None,
                params=request.params,
                bounds=(MIN_REGULARIZATION, MAX_REGULARIZATION),
            )
        except ValueError as exc:
            raise _invalid(f"auto: {exc}", ["body", "mechanism"]) from exc
        point: GridPoint | None = None
        for candidate in choice.ranked:
            assert candidate.loss is not None
            assert candidate.regularization is not None
            params = dict(request.params) if candidate.loss == "huber" else {}
            try:
                point = plan_point(
                    candidate.mechanism,
                    n=n,
                    d=d,
                    epsilon=float(eps),
                    delta=float(request.delta),
                    loss=candidate.loss,
                    regularization=candidate.regularization,
                    params=params,
                    task=task.task,
                    n_classes=task.n_classes,
                )
            except (ValueError, TypeError, ArithmeticError):
                continue
            point = replace(
                point,
                mechanism=candidate.mechanism,
                regularization_rule=candidate.regularization_rule,
            )
            break
        if point is None:
            raise _invalid(f"auto: no candidate fits ε = {eps:g} here", ["body", "mechanism"])
        points.append(point)
    notes = [
        f"auto on {task.describe()}: per ε, {RULE}; as a fit with these public inputs would "
        "choose (the fit's record says why)",
        "no simulated band: auto on multi-class and numeric labels simulates nothing",
    ]
    return points, notes
