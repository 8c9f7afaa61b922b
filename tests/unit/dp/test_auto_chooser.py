"""The auto chooser's numerics (service/dp/analysis/auto.py, auto_simulation.py): its reference
task, its predictor against hand-derived accuracies, and its decisions for hand-set public
inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.dp.analysis import auto, auto_simulation
from service.dp.analysis.regularization import auto_regularization


def test_reference_task_is_the_documented_one() -> None:
    X, y = auto_simulation.reference_task(21, 0.8, 6000)
    # rows on the unit sphere with the intercept coordinate 0.3
    assert np.allclose(np.linalg.norm(X, axis=1), 1.0)
    assert np.all(X[:, 0] == 0.3)
    # the positive (minority) class has frequency 1 − 0.8 = 0.2 up to sampling: the labels
    # are Bernoulli draws whose mean the intercept sets to 0.2 on these rows (4 s.d.)
    assert abs(np.mean(y > 0) - 0.2) < 4 * math.sqrt(0.2 * 0.8 / 6000)
    # fixed: the same arrays again (not the cache's object: a fresh generation)
    auto_simulation.reference_task.cache_clear()
    X2, y2 = auto_simulation.reference_task(21, 0.8, 6000)
    assert np.array_equal(X, X2)
    assert np.array_equal(y, y2)


def test_predictor_without_noise_reaches_the_bayes_accuracy() -> None:
    # On the balanced reference P(y = 1 | u) = σ(κ√(d−1)·vᵀu) with intercept 0, and
    # √(d−1)·vᵀu is close to N(0, 1), so the Bayes rule's accuracy is E σ(κ|Z|), κ = 2,
    # computed here by quadrature; ε = 1000 leaves a fit of 2000 rows only its sampling error.
    z = np.linspace(0.0, 8.0, 80001)
    phi = np.exp(-(z**2) / 2) / math.sqrt(2 * math.pi)
    bayes = float(np.trapezoid(2 * phi / (1 + np.exp(-auto_simulation.REFERENCE_SIGNAL * z)), z))
    assert bayes == pytest.approx(0.778, abs=1e-3)
    band = auto.expected_accuracy(
        auto_simulation.Candidate.of("objective_perturbation", 1e-4),
        n=2000,
        d=21,
        epsilon=1000.0,
        delta=0.0,
        loss="logistic",
        majority=None,
        baseline_source="unknown",
    )
    assert bayes - 0.025 < band.mean < bayes + 0.015


def test_predictor_under_overwhelming_noise_is_a_coin_flip() -> None:
    # output perturbation: E‖b‖ = 2d/(nλε) = 2·21/(100·1e-4·0.01) = 4.2e6 against ‖w*‖ ≤ 1/λ
    # = 1e4: the released direction is uniform, about half right on the balanced reference
    band = auto.expected_accuracy(
        auto_simulation.Candidate.of("output_perturbation", 1e-4),
        n=100,
        d=21,
        epsilon=0.01,
        delta=0.0,
        loss="logistic",
        majority=None,
        baseline_source="unknown",
    )
    assert abs(band.mean - 0.5) < 0.1
    assert not band.below_baseline  # no baseline known: no warning


def test_tiny_budget_keeps_the_preferred_mechanism_at_its_rule_and_is_below_the_majority() -> None:
    # n·ε = 100 for d = 51: every mechanism's noise swamps the signal on the reference, no
    # candidate is clearly better than the first in the order (objective perturbation at δ = 0,
    # at the automatic λ), and nothing beats always answering the majority class (0.75).
    choice = auto.choose(
        n=2000,
        d=51,
        epsilon=0.05,
        delta=0.0,
        loss="logistic",
        regularization=None,
        majority=0.75,
    )
    # nε = 100: the projection rule keeps k = ⌈0.14142·100^(2/3)⌉ = ⌈3.047⌉ = 4 of the 51
    # columns (3·4 < 51), and λ is the automatic λ at d = 4
    rule = auto_regularization("objective_perturbation", n=2000, d=4, epsilon=0.05)
    assert choice.chosen == auto_simulation.Candidate.of(
        "objective_perturbation", rule.regularization, {"projection_dim": 4}
    )
    record = choice.to_dict()["projection_rule"]
    assert record["projection_dim"] == 4
    unprojected = auto_regularization("objective_perturbation", n=2000, d=51, epsilon=0.05)
    assert record["unprojected"]["regularization"] == unprojected.regularization
    best = max(f.mean for f in choice.figures if f.excluded is None)
    assert best < 0.75
    band = auto.expected_accuracy(
        choice.chosen,
        n=2000,
        d=51,
        epsilon=0.05,
        delta=0.0,
        loss="logistic",
        majority=0.75,
        baseline_source="test",
    )
    assert band.below_baseline


def test_delta_zero_excludes_the_gaussian_mechanisms_with_the_reason() -> None:
    pure = auto.auto_candidates(
        n=500, d=6, epsilon=1.0, delta=0.0, loss="logistic", regularization=0.01
    )
    gaussian = [f for f in pure if f.candidate.mechanism == "gaussian_objective_perturbation"]
    assert gaussian
    assert all(f.excluded and "delta" in f.excluded for f in gaussian)
    approx = auto.auto_candidates(
        n=500, d=6, epsilon=1.0, delta=1e-6, loss="logistic", regularization=0.01
    )
    assert all(f.excluded is None for f in approx)
    # a given λ is kept; the grid otherwise
    assert {f.candidate.regularization for f in approx} == {0.01}
    grid = auto.auto_candidates(
        n=500, d=6, epsilon=1.0, delta=1e-6, loss="logistic", regularization=None
    )
    # no λ: each mechanism's automatic λ, and the grid for DP-SGD (which has no rule)
    for f in grid:
        mechanism = f.candidate.mechanism
        if mechanism == "dp_sgd":
            assert f.candidate.regularization in auto.LAMBDA_GRID
        else:
            rule = auto_regularization(mechanism, n=500, d=6, epsilon=1.0, delta=1e-6)
            assert f.candidate.regularization == rule.regularization, mechanism
    assert [f.candidate.mechanism for f in grid][:2] == ["noisy_gd", "objective_perturbation"]


def test_choice_follows_the_decision_rule_and_is_reproducible() -> None:
    kwargs = {
        "n": 300,
        "d": 6,
        "epsilon": 0.5,
        "delta": 1e-6,
        "loss": "logistic",
        "regularization": None,
    }
    first = auto.choose(**kwargs)  # type: ignore[arg-type]
    auto._choose_cached.cache_clear()
    second = auto.choose(**kwargs)  # type: ignore[arg-type]
    assert first.to_dict() == second.to_dict()
    scored = [f for f in first.figures if f.excluded is None]
    # by hand: the first in order, replaced only by a clearly better later one
    pick = scored[0]
    for f in scored[1:]:
        diff = np.subtract(f.accuracies, pick.accuracies)
        se = diff.std(ddof=1) / math.sqrt(diff.size)
        if diff.mean() > max(auto.MIN_GAIN, auto.GAIN_Z * se):
            pick = f
    # no projection here: k = ⌈0.14142·150^(2/3)⌉ = 4 and 3·4 ≥ d = 6
    assert "projection_rule" not in first.to_dict()
    assert first.chosen == pick.candidate


@pytest.mark.parametrize(
    ("challenger", "incumbent", "better"),
    [
        ([0.62, 0.61, 0.63, 0.60], [0.60, 0.59, 0.61, 0.58], True),  # +0.02 on every draw
        ([0.605, 0.595, 0.615, 0.585], [0.60, 0.59, 0.61, 0.58], False),  # +0.005 < MIN_GAIN
        # mean +0.0275 but se = 0.0359: 3.2·se = 0.115 is not beaten
        ([0.70, 0.55, 0.68, 0.58], [0.60, 0.60, 0.60, 0.60], False),
        ([0.50, 0.50, 0.50, 0.50], [0.60, 0.60, 0.60, 0.60], False),
    ],
)
def test_clearly_better_by_hand(
    challenger: list[float], incumbent: list[float], better: bool
) -> None:
    assert auto.clearly_better(challenger, incumbent) is better


def test_no_admissible_candidate_is_an_error() -> None:
    def refuse(_mechanism: str, _calibration: object) -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="no single-dataset mechanism"):
        auto.choose(
            n=300,
            d=6,
            epsilon=0.5,
            delta=0.0,
            loss="logistic",
            regularization=0.01,
            public=(np.eye(6)[:4], np.array([1.0, -1.0, 1.0, -1.0])),
            admissible=refuse,
        )


def test_too_many_features_is_refused_before_any_work() -> None:
    d = auto_simulation.MAX_SIMULATED_DIMENSION + 1
    with pytest.raises(ValueError, match="at most"):
        auto.choose(n=1000, d=d, epsilon=1.0, delta=0.0, loss="logistic", regularization=None)
    with pytest.raises(ValueError, match="at most"):
        auto.expected_accuracy(
            auto_simulation.Candidate.of("objective_perturbation", 0.01),
            n=1000,
            d=d,
            epsilon=1.0,
            delta=0.0,
            loss="logistic",
            majority=None,
            baseline_source="unknown",
        )


def test_a_given_regularization_is_never_projected() -> None:
    # the request's λ names the setting: the rule may not change the model it asked for
    choice = auto.choose(n=400, d=31, epsilon=1.0, delta=0.0, loss="logistic", regularization=0.01)
    assert "projection_dim" not in choice.chosen.params
    assert "projection_rule" not in choice.to_dict()


def test_projected_pick_is_simulated_on_the_same_draws() -> None:
    # breast cancer's shape: n = 398, d = 31, ε = 1 → k = ⌈0.14142·398^(2/3)⌉ = ⌈7.652⌉ = 8
    choice = auto.choose(n=398, d=31, epsilon=1.0, delta=0.0, loss="logistic", regularization=None)
    assert choice.chosen.params == {"projection_dim": 8}
    lam = auto_regularization("objective_perturbation", n=398, d=8, epsilon=1.0)
    assert choice.chosen.regularization == lam.regularization
    figures = [f for f in choice.figures if f.candidate == choice.chosen]
    assert len(figures) == 1
    assert len(figures[0].accuracies) == auto_simulation.REPEATS
    assert choice.to_dict()["predicted_accuracy"] == figures[0].mean
