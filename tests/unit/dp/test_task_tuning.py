"""Automatic λ, auto's rule and private selection for multi-class and regression (issue 29):
service.dp.analysis.regularization_tasks, auto_tasks and task_scores, and the selection
mechanisms at the regression score's sensitivity."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats

from service.dp import fit as dp_fit
from service.dp.analysis import repetition
from service.dp.analysis.auto_tasks import rank_for_task, task_candidates
from service.dp.analysis.regularization_tasks import (
    auto_regularization_task,
    excess_risk_objective,
    task_constants,
)
from service.dp.analysis.repetition import repeat_and_select
from service.dp.analysis.selection import exponential_mechanism, tune
from service.dp.analysis.selection_choice import repetition_plan
from service.dp.analysis.task_scores import (
    REGRESSION_RESOLUTION,
    error_score,
    score_sensitivity,
)
from service.dp.core.base import FitResult, LinearModel
from service.dp.core.released import MulticlassModel
from service.dp.data.prepared import PreparedDesign, prepare_design
from service.dp.noise.discrete import discrete_laplace

R, A = 10.0, 0.01

# ---- the λ rule: hand-computed values ------------------------------------------------------


def test_multiclass_objective_lambda_by_hand() -> None:
    # n = 1000, d = 10, K = 4, ε = 0.5: D = 40, L² = 2, m₂ = 8·40·41/0.25 = 52480,
    # λ = √(4·0.01·2·1000 + 2·52480)/(1000·10) = √105040/10⁴
    choice = auto_regularization_task(
        "objective_perturbation",
        task="multiclass",
        n_classes=4,
        n=1000,
        d=10,
        epsilon=0.5,
        loss="logistic",
    )
    assert math.isclose(choice.regularization, math.sqrt(105040.0) / 1e4, rel_tol=1e-12)
    assert math.isclose(choice.terms["m2"], 52480.0, rel_tol=1e-12)
    assert choice.inputs["noise_dimension"] == 40
    assert choice.inputs["curvature_trace"] == 0.75


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 2.0])
def test_multiclass_output_lambda_is_the_root_of_the_hand_cubic_at_r_5_epsilon(
    epsilon: float,
) -> None:
    # n = 1000, d = 10, K = 4: L² = 2, D = 40, c_tr = 3/4, R = 5ε:
    # (R²/2)λ³ − (2·0.01·2/1000 + 2·2·40·41/(1000²ε²))λ − 4·2·(3/4)·41/(1000²ε²) = 0
    choice = auto_regularization_task(
        "output_perturbation",
        task="multiclass",
        n_classes=4,
        n=1000,
        d=10,
        epsilon=epsilon,
        loss="logistic",
    )
    lam, norm = choice.regularization, 5.0 * epsilon
    p = 0.04 / 1000 + 6560.0 / (1e6 * epsilon**2)
    q = 246.0 / (1e6 * epsilon**2)
    assert abs(norm**2 / 2.0 * lam**3 - p * lam - q) <= 1e-12 * max(1.0, q)
    assert lam > 0
    assert choice.constants == {"R": pytest.approx(norm), "A": 0.01}
    # an explicit R still wins (what the calibration scripts pass)
    fixed = auto_regularization_task(
        "output_perturbation",
        task="multiclass",
        n_classes=4,
        n=1000,
        d=10,
        epsilon=epsilon,
        loss="logistic",
        norm=0.5,
    )
    assert fixed.constants["R"] == 0.5
    assert "R = 5ε" in choice.formula
    assert "5ε" not in fixed.formula


def test_regression_output_lambda_is_the_root_of_the_hand_cubic() -> None:
    # Huber h = 2: L = 2, c_tr = 1, D = d = 3, n = 500, ε = 1, R = 1:
    # 0.5λ³ − (2·0.01·4/500 + 2·4·3·4/500²)λ − 4·4·1·4/500² = 0
    choice = auto_regularization_task(
        "output_perturbation",
        task="regression",
        n_classes=1,
        n=500,
        d=3,
        epsilon=1.0,
        loss="huber",
        params={"h": 2.0},
    )
    lam = choice.regularization
    p = 0.08 / 500 + 96.0 / 250000.0
    q = 64.0 / 250000.0
    assert abs(0.5 * lam**3 - p * lam - q) <= 1e-12
    assert lam > 0
    assert choice.constants == {"R": 1.0, "A": 0.01}


def test_non_private_and_adassp_rules() -> None:
    squared = auto_regularization_task(
        "non_private", task="regression", n_classes=1, n=400, d=3, epsilon=None, loss="squared"
    )
    assert math.isclose(squared.regularization, 2.0 * math.sqrt(A) / (R * 20.0), rel_tol=1e-12)
    multi = auto_regularization_task(
        "non_private", task="multiclass", n_classes=3, n=400, d=3, epsilon=None, loss="logistic"
    )
    assert math.isclose(multi.regularization, math.sqrt(2.0) * squared.regularization)
    adassp = auto_regularization_task(
        "adassp",
        task="regression",
        n_classes=1,
        n=400,
        d=3,
        epsilon=1.0,
        delta=1e-6,
        loss="squared",
        bounds=(1e-10, 1e6),
    )
    assert adassp.regularization == 1e-10
    assert not adassp.clamped


def test_the_rule_shrinks_with_n_and_epsilon_and_grows_with_k() -> None:
    def lam(mech: str, n: int, eps: float, k: int) -> float:
        return auto_regularization_task(
            mech, task="multiclass", n_classes=k, n=n, d=8, epsilon=eps, loss="logistic"
        ).regularization

    for mech in ("objective_perturbation", "output_perturbation"):
        assert lam(mech, 2000, 1.0, 3) < lam(mech, 1000, 1.0, 3)
        assert lam(mech, 1000, 2.0, 3) < lam(mech, 1000, 1.0, 3)
        assert lam(mech, 1000, 1.0, 6) > lam(mech, 1000, 1.0, 3)


def test_the_rule_minimises_its_bound() -> None:
    constants = task_constants("multiclass", d=6, n_classes=3, loss="logistic")
    for mech in ("objective_perturbation", "output_perturbation"):
        choice = auto_regularization_task(
            mech, task="multiclass", n_classes=3, n=800, d=6, epsilon=1.0, loss="logistic"
        )
        lam, norm = choice.unclamped, choice.constants["R"]
        at = excess_risk_objective(mech, lam, n=800, epsilon=1.0, constants=constants, norm=norm)
        for factor in (0.9, 1.1):
            other = excess_risk_objective(
                mech, lam * factor, n=800, epsilon=1.0, constants=constants, norm=norm
            )
            assert at < other


@pytest.mark.parametrize(
    ("mechanism", "task", "loss", "needle"),
    [
        ("dp_sgd", "multiclass", "logistic", "no rule for 'dp_sgd'"),
        ("objective_perturbation", "regression", "squared", "huber loss only"),
        ("adassp", "regression", "huber", "squared loss"),
        ("objective_perturbation", "binary", "logistic", "no task rule"),
    ],
)
def test_no_rule_is_a_value_error(mechanism: str, task: str, loss: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        auto_regularization_task(
            mechanism, task=task, n_classes=3, n=100, d=3, epsilon=1.0, loss=loss
        )


# ---- auto's rule ---------------------------------------------------------------------------


def test_auto_candidates_come_from_the_registry() -> None:
    assert set(task_candidates("multiclass")) >= {"objective_perturbation", "output_perturbation"}
    assert "adassp" in task_candidates("regression")
    assert "adassp" not in task_candidates("multiclass")


@pytest.mark.parametrize(
    ("task", "delta", "loss", "chosen", "chosen_loss"),
    [
        ("multiclass", 0.0, None, "objective_perturbation", "logistic"),
        ("multiclass", 1e-6, None, "objective_perturbation", "logistic"),
        ("regression", 1e-6, None, "adassp", "squared"),
        ("regression", 1e-6, "squared", "adassp", "squared"),
        ("regression", 0.0, None, "objective_perturbation", "huber"),
        ("regression", 1e-6, "huber", "objective_perturbation", "huber"),
        ("regression", 1e-6, "h", "objective_perturbation", "huber"),
    ],
)
def test_auto_rule(
    task: str, delta: float, loss: str | None, chosen: str, chosen_loss: str
) -> None:
    choice = rank_for_task(
        task,
        n_classes=4 if task == "multiclass" else 1,
        n=5000,
        d=20,
        epsilon=1.0,
        delta=delta,
        loss=None if loss == "h" else loss,  # "h": no loss, a Huber width
        params={"h": 0.8} if loss == "h" else None,
    )
    first = choice.ranked[0]
    assert (first.mechanism, first.loss) == (chosen, chosen_loss)
    record = choice.record(first)
    assert record["chosen"]["mechanism"] == chosen
    assert record["reason"]
    excluded = {c["mechanism"] for c in record["candidates"] if "excluded" in c}
    assert "dp_sgd" in excluded or task == "regression"


@pytest.mark.parametrize(("task", "loss"), [("regression", "logistic"), ("multiclass", "huber")])
def test_auto_refuses_a_loss_of_another_task(task: str, loss: str) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        rank_for_task(task, n_classes=3, n=100, d=3, epsilon=1.0, delta=0.0, loss=loss)


# ---- the score and its sensitivity ---------------------------------------------------------


def test_error_scores_by_hand() -> None:
    X = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    linear = LinearModel(coef=np.array([2.0, -0.5]))  # scores 2, −0.5, 0.8
    assert error_score(linear, X, np.array([1.0, 1.0, -1.0]), "binary") == 2
    # regression: clipped predictions 1, −0.5, 0.8; y = 0, −0.5, −1:
    # ⌈64·1/4⌉ + 0 + ⌈64·3.24/4⌉ = 16 + 0 + ⌈51.84⌉ = 68
    assert error_score(linear, X, np.array([0.0, -0.5, -1.0]), "regression") == 68
    multi = MulticlassModel(coef=np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    # scores (1,0,0), (0,1,0), (0.6,0.8,0): argmax 0, 1, 1
    assert error_score(multi, X, np.array([0.0, 2.0, 1.0]), "multiclass") == 1
    assert (score_sensitivity("binary"), score_sensitivity("multiclass")) == (1, 1)
    assert score_sensitivity("regression") == REGRESSION_RESOLUTION == 64


def test_the_regression_score_moves_by_at_most_its_sensitivity() -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 4))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = rng.uniform(-1.0, 1.0, size=50)
    model = LinearModel(coef=rng.normal(scale=3.0, size=4))
    base = error_score(model, X, y, "regression")
    worst = 0
    for row in range(50):
        for new_y in (-1.0, 1.0, 0.0):
            for new_x in (X[row], -X[row], np.zeros(4)):
                X2, y2 = X.copy(), y.copy()
                X2[row], y2[row] = new_x, new_y
                worst = max(worst, abs(error_score(model, X2, y2, "regression") - base))
    assert 0 < worst <= 64
    # the extreme row: y = 1, prediction clipped to −1 costs exactly 64
    extreme = LinearModel(coef=np.array([-10.0]))
    assert error_score(extreme, np.array([[1.0]]), np.array([1.0]), "regression") == 64


@pytest.mark.statistical
def test_the_exponential_mechanism_at_sensitivity_64_follows_its_law() -> None:
    errors = [100, 160, 250]
    epsilon = 1.0
    weights = np.exp(-epsilon * np.asarray(errors) / (2 * 64))
    expected = weights / weights.sum()
    rng = np.random.default_rng(17)
    draws = [exponential_mechanism(errors, epsilon, rng, sensitivity=64)[0] for _ in range(6000)]
    observed = np.bincount(draws, minlength=3)
    assert stats.chisquare(observed, 6000 * expected).pvalue > 1e-3
    # control: the same draws reject the law at half or twice the sensitivity
    for wrong in (32, 128):
        wrong_weights = np.exp(-epsilon * np.asarray(errors) / (2 * wrong))
        wrong_law = wrong_weights / wrong_weights.sum()
        assert stats.chisquare(observed, 6000 * wrong_law).pvalue < 1e-6
    probs = exponential_mechanism(errors, epsilon, rng, sensitivity=64)[1]
    assert np.allclose(probs, expected)
    # a held-out row moves every score by at most 64: the probabilities by at most e^ε
    for shift in ([64, 0, 0], [0, -64, 64], [-64, 64, -64]):
        other = exponential_mechanism(
            [e + s for e, s in zip(errors, shift, strict=True)], epsilon, rng, sensitivity=64
        )[1]
        assert np.max(np.abs(np.log(np.asarray(probs) / np.asarray(other)))) <= epsilon + 1e-12


def test_the_exponential_mechanism_refuses_a_bad_sensitivity() -> None:
    with pytest.raises(ValueError, match="sensitivity"):
        exponential_mechanism([1, 2], 1.0, None, sensitivity=0)


def _regression_design(n: int, seed: int) -> PreparedDesign:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.clip(X @ np.array([0.8, -0.6, 0.3, 0.0]) + 0.05 * rng.normal(size=n), -1.0, 1.0)
    return prepare_design(X, y, "regression", 1)


def test_repetition_adds_discrete_laplace_of_scale_64_over_eps_s_for_regression(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scales: list[Fraction] = []
    real = discrete_laplace

    def spy(scale: Fraction, rng: Any) -> int:
        scales.append(scale)
        return int(real(scale, rng))

    monkeypatch.setattr(repetition, "discrete_laplace", spy)
    design = _regression_design(200, 1)
    plan = repetition_plan("liu_talwar", k=2, n=200, epsilon=1.0, delta=0.0)

    def fit(full: PreparedDesign, lam: float) -> FitResult:
        return FitResult(
            mechanism="output_perturbation",
            model=LinearModel(coef=np.full(4, lam)),
            epsilon=0.0,
            delta=0.0,
            details={},
            composition="",
            expected_noise_norm=None,
            seeded=True,
        )

    repeat_and_select(design, [0.1, 0.2], plan=plan, fit_one=fit, rng=np.random.default_rng(0))
    assert scales
    assert set(scales) == {64 / Fraction(plan.score_epsilon)}


@pytest.mark.statistical
@pytest.mark.parametrize("method", ["cms", "liu_talwar"])
def test_tuning_a_regression_fit_avoids_a_useless_lambda(method: str) -> None:
    """Huber objective perturbation at λ = 10 shrinks w to ≈ 0 (clipped squared error ≈ the
    labels' variance), at λ = 10⁻² it fits; the score gap is thousands of units for Δ = 64."""
    design = _regression_design(3000, 2)
    rng = np.random.default_rng(9)
    chosen = []
    for _ in range(6):

        def fit_at(part: PreparedDesign, lam: float, eps: float = 2.0) -> FitResult:
            return dp_fit(
                part,
                None,
                "objective_perturbation",
                epsilon=eps,
                loss="huber",
                regularization=lam,
                task="regression",
                n_classes=1,
                rng=rng,
            )

        result = tune(
            design,
            [10.0, 1e-2],
            epsilon=2.0,
            fit_one=lambda part, lam: fit_at(part, lam),
            fit_at=fit_at,
            method=method,
            rng=rng,
        )
        chosen.append(result.chosen)
    assert chosen.count(1) >= 5


def _multiclass_design(n: int, seed: int) -> PreparedDesign:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    W = np.array([[3.0, 0.0, 0.0, 0.0], [0.0, 3.0, 0.0, 0.0], [-3.0, -3.0, 0.0, 0.0]])
    y = np.argmax(X @ W.T, axis=1).astype(np.float64)
    return prepare_design(X, y, "multiclass", 3)


@pytest.mark.statistical
def test_tuning_a_multiclass_fit_avoids_a_useless_lambda() -> None:
    design = _multiclass_design(3000, 4)
    rng = np.random.default_rng(21)
    chosen = []
    for _ in range(6):

        def fit_one(part: PreparedDesign, lam: float) -> FitResult:
            return dp_fit(
                part,
                None,
                "output_perturbation",
                epsilon=2.0,
                regularization=lam,
                task="multiclass",
                n_classes=3,
                rng=rng,
            )

        result = tune(design, [1e-5, 0.05], epsilon=2.0, fit_one=fit_one, rng=rng)
        chosen.append(result.chosen)
    assert chosen.count(1) >= 5
