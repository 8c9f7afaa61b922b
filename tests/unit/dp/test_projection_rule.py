"""The public projection rule of ``"mechanism": "auto"`` (service/dp/analysis/projection_rule.py):
its value in hand-computed cases, when it keeps every column, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.dp.analysis import projection_rule as rule
from service.dp.analysis.projection_rule import auto_projection

# the calibrated constants, restated: changing them must be deliberate
C, K_MIN = 0.1414213562373095, 2


def test_the_calibrated_constants() -> None:
    assert rule.SCALE == C
    assert pytest.approx(0.02**0.5, rel=1e-15) == C
    assert rule.MIN_DIMENSION == K_MIN
    assert pytest.approx(1 / 3) == rule.OFF_FRACTION


@pytest.mark.parametrize(
    ("n", "d", "epsilon", "k"),
    [
        # breast cancer's training split: nε = 398, 398^(2/3) = 54.107, × 0.14142 = 7.652 → 8;
        # 3·8 = 24 < 31
        (398, 31, 1.0, 8),
        # nε = 199: 199^(2/3) = 34.085 → 4.820 → 5
        (398, 31, 0.5, 5),
        # nε = 39.8: 39.8^(2/3) = 11.657 → 1.649 → 2 (= k_min)
        (398, 31, 0.1, 2),
        # digits: nε = 1257: 116.47 → 16.47 → 17; 3·17 = 51 < 65
        (1257, 65, 1.0, 17),
        # Adult at ε = 0.1: nε = 3016.2: 208.76 → 29.52 → 30; 3·30 = 90 < 106
        (30_162, 106, 0.1, 30),
        # nε = 550: 550^(2/3) = 67.13 → 9.49 → 10, and 3·10 = 30 < 31: projected
        (1100, 31, 0.5, 10),
        # nε = 8: 8^(2/3) = 4 exactly, × 0.14142 = 0.566 → 1, raised to k_min = 2
        (80, 10, 0.1, 2),
    ],
)
def test_dimension_by_hand(n: int, d: int, epsilon: float, k: int) -> None:
    choice = auto_projection("objective_perturbation", n=n, d=d, epsilon=epsilon)
    assert choice is not None
    assert choice.dimension == k
    record = choice.record()
    assert record["projection_dim"] == k
    assert record["inputs"] == {"n": n, "d": d, "epsilon": epsilon}
    assert record["constants"] == {"c": C, "k_min": float(K_MIN), "off_fraction": 1 / 3}


@pytest.mark.parametrize(
    ("n", "d", "epsilon"),
    [
        (30_162, 106, 0.5),  # nε = 15081: k = 87, 3·87 ≥ 106: every column kept
        (3000, 64, 1.0),  # nε = 3000: 208.0 → 29.42 → 30, 3·30 = 90 ≥ 64
        (1100, 30, 0.5),  # k = 10 (above), 3·10 = 30 ≥ d = 30: the off-switch's boundary
        (80, 6, 0.1),  # k = k_min = 2, 3·2 = 6 ≥ 6
        (100, 3, 0.1),  # d below 3·k_min
    ],
)
def test_no_projection_when_k_reaches_a_third_of_d(n: int, d: int, epsilon: float) -> None:
    assert auto_projection("objective_perturbation", n=n, d=d, epsilon=epsilon) is None


@pytest.mark.parametrize(
    "mechanism", ["output_perturbation", "noisy_gd", "dp_sgd", "gaussian_objective_perturbation"]
)
def test_only_objective_perturbation_is_projected(mechanism: str) -> None:
    assert auto_projection(mechanism, n=398, d=31, epsilon=1.0) is None


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_only_binary_tasks_are_projected(task: str) -> None:
    assert auto_projection("objective_perturbation", n=398, d=31, epsilon=1.0, task=task) is None


def test_dimension_grows_with_n_and_epsilon() -> None:
    ks = [rule.rule_dimension(n, 1.0) for n in (100, 400, 1600, 6400)]
    assert ks == sorted(ks)
    assert ks[-1] > ks[0]
    assert rule.rule_dimension(1000, 0.5) < rule.rule_dimension(1000, 1.0)


@pytest.mark.parametrize(
    ("n", "d", "epsilon"),
    [(0, 10, 1.0), (10, 0, 1.0), (10, 10, 0.0), (10, 10, float("nan")), (True, 10, 1.0)],
)
def test_refuses_invalid_inputs(n: int, d: int, epsilon: float) -> None:
    with pytest.raises(ValueError):
        auto_projection("objective_perturbation", n=n, d=d, epsilon=epsilon)


def test_the_constants_are_the_calibration_runs_choice() -> None:
    # benchmarks/calibrate_projection.py --calibrate wrote its choice here; the service's rule
    # must be that choice (re-running the calibration and not porting it fails here)
    path = Path(__file__).resolve().parents[3] / "benchmarks/calibration/projection_rule.json"
    chosen = json.loads(path.read_text())["chosen"]
    assert chosen["form"] == "two_thirds"
    assert chosen["c"] == rule.SCALE
    assert chosen["k_min"] == rule.MIN_DIMENSION
    assert chosen["cutoff"] == pytest.approx(rule.OFF_FRACTION, rel=1e-15)


def test_projected_regularization_is_the_rule_at_d_equal_k() -> None:
    # n = 398, d = 31, ε = 1: k = 8 (above); λ = √(4A·n + 2m₂)/(n·R), m₂ = 4·8·9/1 = 288,
    # A = 0.01, R = 10: √(15.92 + 576)/3980 = √591.92/3980
    found = rule.projected_regularization("objective_perturbation", n=398, d=31, epsilon=1.0)
    assert found is not None
    choice, lam = found
    assert choice.dimension == 8
    assert lam.regularization == pytest.approx(591.92**0.5 / 3980.0, rel=1e-12)
    assert (
        rule.projected_regularization("objective_perturbation", n=3000, d=64, epsilon=1.0) is None
    )
