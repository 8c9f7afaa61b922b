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
  a function of public quantities, as a fit would choose) with its λ, noise and bound, the
  first ranked candidate the fit would admit (a finite calibration,
  :func:`service.domain.ranges.check_calibration`). Without a public reference a fit of
  ``auto`` spends the slice ρ·ε on the private trivial-model baseline and chooses and fits at
  ε − ρε (:func:`service.domain.fits.expected_tasks.task_baseline_slice`); the point then does
  the same: its mechanism, λ, noise and bound are those at ε − ρε, ``spent_epsilon`` is the
  whole ε (the fit's and the slice's), and it carries the slice (``private_baseline``, the
  quote's plan) and the quote's band on the synthetic reference (``expected_accuracy``).
  A function of public n, d, ε, δ and whether a reference exists: nothing is released.
  With a public reference there is no slice and no simulated band, and the notes say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.db.models import Dataset
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.datasets.labels import LabelTask
from service.domain.errors import InvalidInputError
from service.domain.fits import auto as fit_auto
from service.domain.fits.expected_tasks import PRIVATE_SOURCES, task_baseline_slice
from service.domain.ranges import MAX_REGULARIZATION, MIN_REGULARIZATION, check_calibration
from service.dp import calibrate
from service.dp.analysis.auto_tasks import RULE, rank_for_task
from service.dp.analysis.expected_tasks import expected_task_band_synthetic
from service.dp.analysis.planning import GridPoint, plan_point
from service.dp.analysis.regularization_tasks import auto_regularization_task, task_record
from service.dp.optimize.solvers import ConvergenceError

__all__ = [
    "MAX_TASK_AUTO_EPSILONS",
    "check_plan_target",
    "plan_regularization",
    "task_auto_plan",
    "task_auto_slices",
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


@dataclass(frozen=True, slots=True)
class _AutoAt:
    """What :func:`task_baseline_slice` reads of a fit request: mechanism ``auto`` at ε."""

    mechanism: str
    epsilon: float


def task_auto_slices(
    uow: UnitOfWork,
    uow_factory: UnitOfWorkFactory | None,
    target: Dataset,
    epsilons: list[float],
) -> dict[float, dict[str, Any]]:
    """Per ε, the private baseline's slice a ``mechanism: auto`` fit of ``target`` at that ε
    would spend (the quote's ``private_baseline``), by the fit's own rule
    (:func:`task_baseline_slice`); empty when the site has a public reference. Public inputs
    only. Call inside an open ``with uow:``."""
    slices: dict[float, dict[str, Any]] = {}
    for eps in epsilons:
        _, plan = task_baseline_slice(uow, uow_factory, target, _AutoAt(fit_auto.AUTO, eps))
        if plan is None:
            return {}
        slices[eps] = plan
    return slices


def _half_range(task: LabelTask) -> float:
    if task.task != "regression":
        return 1.0
    assert task.lower is not None
    assert task.upper is not None
    return (task.upper - task.lower) / 2.0


def _admitted_point(
    candidate: Any, *, n: int, d: int, epsilon: float, request: Any, task: LabelTask
) -> GridPoint | None:
    """The candidate's point at ``epsilon``, or None when the fit would not admit it (its
    calibration raises or is not finite, as :func:`service.domain.fits.submit` checks)."""
    params = dict(request.params) if candidate.loss == "huber" else {}
    try:
        calibration = calibrate(
            candidate.mechanism,
            n=n,
            d=d,
            epsilon=epsilon,
            delta=float(request.delta),
            loss=candidate.loss,
            regularization=candidate.regularization,
            task=task.task,
            n_classes=task.n_classes,
            **params,
        )
        check_calibration(
            epsilon=calibration.epsilon,
            delta=calibration.delta,
            details=calibration.details,
            noise_norm=calibration.expected_noise_norm,
        )
        point = plan_point(
            candidate.mechanism,
            n=n,
            d=d,
            epsilon=epsilon,
            delta=float(request.delta),
            loss=candidate.loss,
            regularization=candidate.regularization,
            params=params,
            task=task.task,
            n_classes=task.n_classes,
        )
    except (ValueError, TypeError, ArithmeticError, InvalidInputError):
        return None
    return replace(
        point, mechanism=candidate.mechanism, regularization_rule=candidate.regularization_rule
    )


def _synthetic_band(
    candidate: Any,
    *,
    n: int,
    d: int,
    epsilon: float,
    request: Any,
    task: LabelTask,
    slice_plan: Mapping[str, Any],
) -> dict[str, Any] | None:
    """The quote's band of the chosen candidate before the release
    (:func:`service.domain.fits.expected_tasks.with_task_band`), or None when it cannot be
    simulated (the fit then has none either)."""
    try:
        band = expected_task_band_synthetic(
            candidate.mechanism,
            regularization=candidate.regularization,
            params=dict(request.params) if candidate.loss == "huber" else {},
            task=task.task,
            n_classes=task.n_classes,
            n=n,
            d=d,
            epsilon=epsilon,
            delta=float(request.delta),
            loss=candidate.loss,
            half_range=_half_range(task),
            baseline_source=PRIVATE_SOURCES[task.task],
        )
    except (ValueError, ConvergenceError):
        return None
    return band.to_dict() | {"private_baseline": dict(slice_plan)}


def task_auto_plan(
    target: Dataset,
    request: Any,
    task: LabelTask,
    slices: Mapping[float, Mapping[str, Any]] | None = None,
) -> tuple[list[GridPoint], list[str], list[dict[str, Any]]]:
    """The points, notes and per-point additions (the slice and the band) of a
    ``mechanism: auto`` plan on a multi-class or numeric label; ``slices`` from
    :func:`task_auto_slices` (module docstring)."""
    epsilons = sorted(set(request.epsilons))
    if len(epsilons) > MAX_TASK_AUTO_EPSILONS:
        raise _invalid(f"at most {MAX_TASK_AUTO_EPSILONS} ε values with auto", ["body", "epsilons"])
    if request.target_accuracy is not None:
        raise _invalid(
            "auto plans answer no target accuracy; name a mechanism", ["body", "target_accuracy"]
        )
    fit_auto.check_auto_request(epsilon=epsilons[0], params=request.params)
    slices = slices or {}
    n, d = int(target.n_rows), int(target.n_features)
    points: list[GridPoint] = []
    extras: list[dict[str, Any]] = []
    for eps in epsilons:
        slice_plan = slices.get(eps)
        # without a public reference the fit chooses and fits at ε less the slice
        eps_fit = float(eps) if slice_plan is None else float(slice_plan["fit_epsilon"])
        try:
            choice = rank_for_task(
                task.task,
                n_classes=task.n_classes,
                n=n,
                d=d,
                epsilon=eps_fit,
                delta=float(request.delta),
                loss=request.loss if request.loss_given else None,
                params=request.params,
                bounds=(MIN_REGULARIZATION, MAX_REGULARIZATION),
            )
        except ValueError as exc:
            raise _invalid(f"auto: {exc}", ["body", "mechanism"]) from exc
        point: GridPoint | None = None
        chosen: Any = None
        for candidate in choice.ranked:
            assert candidate.loss is not None
            assert candidate.regularization is not None
            point = _admitted_point(
                candidate, n=n, d=d, epsilon=eps_fit, request=request, task=task
            )
            if point is not None:
                chosen = candidate
                break
        if point is None:
            raise _invalid(f"auto: no candidate fits ε = {eps:g} here", ["body", "mechanism"])
        extra: dict[str, Any] = {}
        if slice_plan is not None:
            point = replace(point, epsilon=float(eps), spent_epsilon=float(eps))
            extra["private_baseline"] = dict(slice_plan)
            band = _synthetic_band(
                chosen, n=n, d=d, epsilon=eps_fit, request=request, task=task, slice_plan=slice_plan
            )
            if band is not None:
                extra["expected_accuracy"] = band
        points.append(point)
        extras.append(extra)
    notes = [
        f"auto on {task.describe()}: per ε, {RULE}; as a fit with these public inputs would "
        "choose (the fit's record says why)",
    ]
    if slices:
        notes.append(
            "no public reference: an auto fit spends a slice of each ε on a private "
            "trivial-model baseline and chooses and fits at the rest; each point shows that "
            "choice at the rest, the slice (private_baseline) and the fit's band on the "
            "synthetic reference (expected_accuracy), and spent_epsilon is the whole ε"
        )
    else:
        notes.append(
            "no simulated band: with a public reference the plan of auto on multi-class and "
            "numeric labels simulates nothing (the fit's quote shows its band on the reference)"
        )
    return points, notes, extras
