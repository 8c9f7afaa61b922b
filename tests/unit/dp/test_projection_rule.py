"""The public projection rule of ``"mechanism": "auto"`` (service/dp/analysis/projection_rule.py):
its value in hand-computed cases, when it keeps every column, and its refusals."""

from __future__ import annotations

import pytest

from service.dp.analysis import projection_rule as rule
from service.dp.analysis.projection_rule import auto_projection

C, K_MIN = 50.0, 4  # the calibrated constants, restated: changing them must be deliberate


def test_the_calibrated_constants() -> None:
    assert rule.ROWS_PER_DIMENSION == C
    assert rule.MIN_DIMENSION == K_MIN


@pytest.mark.parametrize(
    ("n", "d", "epsilon", "k"),
    [
        # breast cancer's training split: nε = 398 → ⌈398/50⌉ = ⌈7.96⌉ = 8 of 31 columns
        (398, 31, 1.0, 8),
        # nε = 199 → ⌈3.98⌉ = 4
        (398, 31, 0.5, 4),
        # nε = 39.8 → ⌈0.796⌉ = 1, raised to k_min = 4
        (398, 31, 0.1, 4),
        # digits: nε = 1257 → ⌈25.14⌉ = 26 of 65
        (1257, 65, 1.0, 26),
        # Adult at ε = 0.1: nε = 3016.2 → ⌈60.324⌉ = 61 of 106
        (30_162, 106, 0.1, 61),
        # exactly on a multiple: nε = 500 → 10
        (1000, 40, 0.5, 10),
    ],
)
def test_dimension_by_hand(n: int, d: int, epsilon: float, k: int) -> None:
    choice = auto_projection("objective_perturbation", n=n, d=d, epsilon=epsilon)
    assert choice is not None
    assert choice.dimension == k
    record = choice.record()
    assert record["projection_dim"] == k
    assert record["inputs"] == {"n": n, "d": d, "epsilon": epsilon}
    assert record["constants"] == {"c": C, "k_min": float(K_MIN)}


@pytest.mark.parametrize(
    ("n", "d", "epsilon"),
    [
        (30_162, 106, 0.5),  # nε/50 = 301.6 ≥ 106: every column kept
        (1000, 20, 1.0),  # k = 20 = d: a projection would not reduce the noise's dimension
        (100, 4, 0.1),  # k_min = 4 = d
        (100, 3, 0.1),  # d below k_min
    ],
)
def test_no_projection_when_k_reaches_d(n: int, d: int, epsilon: float) -> None:
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
    assert ks == sorted(ks) and ks[-1] > ks[0]
    assert rule.rule_dimension(1000, 0.5) < rule.rule_dimension(1000, 1.0)


@pytest.mark.parametrize(
    ("n", "d", "epsilon"),
    [(0, 10, 1.0), (10, 0, 1.0), (10, 10, 0.0), (10, 10, float("nan")), (True, 10, 1.0)],
)
def test_refuses_invalid_inputs(n: int, d: int, epsilon: float) -> None:
    with pytest.raises(ValueError):
        auto_projection("objective_perturbation", n=n, d=d, epsilon=epsilon)
