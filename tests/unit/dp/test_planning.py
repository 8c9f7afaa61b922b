"""The planner's numerics (:mod:`service.dp.analysis.planning`): bounds and the target answer."""

from __future__ import annotations

import numpy as np
import pytest

from service.dp import calibrate
from service.dp.analysis.planning import GridPoint, excess_risk_bound, plan_point, smallest_epsilon


def test_objective_perturbation_bound_uses_the_coefficient_shift() -> None:
    calibration = calibrate(
        "objective_perturbation",
        n=5000,
        d=8,
        epsilon=1.0,
        delta=0.0,
        loss="logistic",
        regularization=1e-2,
    )
    details = calibration.details
    shift = float(details["expected_coef_shift_bound"])
    smooth = 0.25 + float(details["effective_regularization"])
    bound = excess_risk_bound("objective_perturbation", details, calibration.expected_noise_norm)
    assert bound == pytest.approx(smooth / 2 * 9 / 8 * shift**2)


def test_no_bound_for_other_mechanisms() -> None:
    point = plan_point(
        "dp_sgd",
        n=1000,
        d=5,
        epsilon=1.0,
        delta=1e-6,
        loss="huber",
        regularization=1e-2,
        params={"epochs": 2, "batch_size": 10, "h": 0.5},
    )
    assert point.excess_risk_bound is None


def test_bounds_fall_as_epsilon_and_n_grow() -> None:
    def bound(n: int, eps: float) -> float:
        point = plan_point(
            "output_perturbation",
            n=n,
            d=10,
            epsilon=eps,
            delta=0.0,
            loss="logistic",
            regularization=1e-3,
            params={},
        )
        assert point.excess_risk_bound is not None
        return point.excess_risk_bound

    assert bound(1000, 0.1) > bound(1000, 1.0) > bound(10_000, 1.0)
    # ∝ 1/(nε)²
    assert bound(1000, 0.1) / bound(1000, 1.0) == pytest.approx(100.0)


def _point(eps: float, accuracies: list[float]) -> GridPoint:
    return GridPoint(eps, 1e-3, eps, 0.0, None, None, tuple(accuracies))


def test_smallest_epsilon_reaching_a_target() -> None:
    points = [
        _point(1.0, [0.82, 0.83, 0.81, 0.84]),
        _point(0.1, [0.6, 0.7, 0.65, 0.62]),
        _point(0.5, [0.80, 0.79, 0.81, 0.805]),
    ]
    found = smallest_epsilon(points, accuracy=0.8, probability=0.75)
    assert found is not None
    assert found.epsilon == 0.5
    found = smallest_epsilon(points, accuracy=0.8, probability=1.0)
    assert found is not None
    assert found.epsilon == 1.0
    assert smallest_epsilon(points, accuracy=0.9, probability=0.5) is None
    summary = points[0].to_dict()["simulated_accuracy"]
    assert summary["mean"] == pytest.approx(np.mean([0.82, 0.83, 0.81, 0.84]))
