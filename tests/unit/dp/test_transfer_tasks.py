"""Hypothesis transfer on multi-class and numeric labels (``service.dp.multisite.transfer``,
issue 29): the centred multinomial and Huber-residual objective perturbation.

* η = 0 is the task's objective perturbation with the same noise; η pulls the fit towards the
  source and a large η returns it (K × d for K classes).
* The calibration is the task's at strong convexity λ + η, derived by hand: multi-class
  ε_J = (K − 1)·ln(1 + 1/(Kn(λ + η + Δ))), β = ε′/(2√2); regression ε_J = ln(1 + 1/(n(λ + η + Δ))),
  β = ε′/(2h). η keeps a small λ off the extra-ridge branch. The centre adds η‖C₀‖ to the
  certificate's public bound L, nothing to ε.
* KS tests of the released noise: b recovered from the first-order condition of the centred
  objective at each released model follows ν(b) ∝ exp(−β‖b‖) with the hand-derived β
  (‖b‖ ~ Gamma(D, 1/β), its direction uniform), and the same test rejects half and twice the
  noise.
* An empirical audit of the regression transfer on a neighbouring pair whose privacy loss is
  known exactly (below), with a half-noise control it must catch (as
  tests/unit/dp/test_task_audits.py audits plain objective perturbation).
* A bad source (wrong shape, not finite), a loss the task does not take: ``ValueError``.

The audit's pair (Huber h = ½, n = 2, d = 1, x = 1, λ = 10, η = 2, source u = ½, ε = 2):
D = (y = 1, 1), D′ = (−1, 1). The centred objective's first-order condition is
w = (Σψ(y_i − w) + nηu − b)/(n(λ + η)). For |w| < ½ every residual is beyond h, so ψ = ±h:
Σψ = 1 under D and 0 under D′, with ℓ″ = 0 (equal Jacobians). b ~ Laplace(1/β) (the
norm-exponential law in d = 1), so w_D ~ (1 + 2)/24 − b/24 and w_D′ ~ 2/24 − b/24: the centre
moves both by nηu/(n(λ + η)) = 1/12 and cancels, the gap 1/24 is the full gradient
sensitivity 2h = 1 over n(λ + η), and the tail ratio beyond both means is exactly e^{β·2h} =
e^{ε′}, ε′ = ε₁ − ln(1 + 1/24) (Δ = 0), β = ε′/(2h) = ε′. Half the noise spends 2ε′ ≈ 3.9 > ε.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from service.dp import FitResult, fit
from service.dp.core.base import Calibration
from service.dp.core.regression_losses import RegressionHuberLoss
from service.dp.multisite.transfer import (
    _centred_task_plan,
    _run_task,
    transfer_calibration,
    transfer_fit,
)
from service.dp.noise.draws import RELEASE_GRID
from service.dp.optimize import multinomial, regression
from tests.unit.dp._audit import epsilon_lower_bound
from tests.unit.dp._budget import objective_budget
from tests.unit.dp._laws import norm_exponential_fits_only_at_the_right_scale

FloatArray = NDArray[np.float64]
K = 3


def _classes(n: int, d: int, seed: int) -> tuple[FloatArray, FloatArray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    y = np.argmax(X @ rng.normal(size=(K, d)).T * 3.0 + rng.normal(size=(n, K)), axis=1)
    return X, y.astype(np.float64)


def _numbers(n: int, d: int, seed: int) -> tuple[FloatArray, FloatArray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    y = np.clip(X @ rng.normal(size=d) * 0.5 + 0.1 * rng.normal(size=n), -1.0, 1.0)
    return X, y


def _task(task: str) -> dict[str, Any]:
    if task == "multiclass":
        return {"task": "multiclass", "n_classes": K, "loss": "logistic"}
    return {"task": "regression", "loss": "huber"}


def _data(task: str, n: int = 120, d: int = 4, seed: int = 0) -> tuple[FloatArray, FloatArray]:
    return _classes(n, d, seed) if task == "multiclass" else _numbers(n, d, seed)


def _coef(result: FitResult) -> FloatArray:
    """The released coefficients: a d-vector, or K × d for a multi-class model."""
    return np.asarray(result.model.coef, dtype=np.float64)  # type: ignore[attr-defined]


def _source(task: str, d: int = 4) -> FloatArray:
    rng = np.random.default_rng(11)
    return rng.normal(size=(K, d) if task == "multiclass" else d) * 2.0


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_zero_strength_is_the_tasks_objective_perturbation_with_the_same_noise(task: str) -> None:
    X, y = _data(task)
    got = transfer_fit(
        X,
        y,
        _source(task),
        epsilon=1.0,
        transfer_strength=0.0,
        regularization=0.05,
        rng=np.random.default_rng(7),
        **_task(task),
    )
    ref = fit(
        X,
        y,
        "objective_perturbation",
        epsilon=1.0,
        regularization=0.05,
        rng=np.random.default_rng(7),
        **_task(task),
    )
    np.testing.assert_array_equal(_coef(got), _coef(ref))
    assert got.details["beta"] == ref.details["beta"]
    assert got.details["task"] == task
    assert got.epsilon == 1.0
    assert got.delta == 0.0
    assert got.mechanism == "transfer"


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_strength_pulls_the_fit_towards_the_source_and_a_large_one_returns_it(task: str) -> None:
    X, y = _data(task)
    source = _source(task)
    distances = []
    for eta in (0.0, 0.1, 1.0, 1e6):
        result = transfer_fit(
            X,
            y,
            source,
            epsilon=2.0,
            transfer_strength=eta,
            regularization=0.05,
            rng=np.random.default_rng(3),
            **_task(task),
        )
        coef = _coef(result)
        assert coef.shape == source.shape
        assert np.all(np.round(coef / RELEASE_GRID) * RELEASE_GRID == coef)
        distances.append(float(np.linalg.norm(coef - source)))
    assert distances == sorted(distances, reverse=True)
    assert distances[-1] < 1e-3


def test_multiclass_calibration_is_the_hand_derived_one_at_lambda_plus_eta() -> None:
    n, d, lam, eta, eps = 20, 2, 0.001, 1.0, 1.0
    cal = transfer_calibration(
        n,
        d,
        epsilon=eps,
        transfer_strength=eta,
        regularization=lam,
        task="multiclass",
        n_classes=K,
    )
    details = cal.details
    # ε₁ from the certified split in dimension dK = 6; at λ + η = 1.001:
    # ε_J = 2·ln(1 + 1/(3·20·1.001)) = 0.0330258 ≤ ε₁/2, so Δ = 0 and β = (ε₁ − ε_J)/(2√2)
    eps1 = objective_budget(eps, n, d * K)
    jacobian = 2.0 * math.log1p(1.0 / (3 * 20 * 1.001))
    assert jacobian == pytest.approx(0.0330258, abs=1e-7)
    assert details["Delta"] == 0.0
    assert details["jacobian_epsilon"] == pytest.approx(jacobian, rel=1e-12)
    assert details["beta"] == pytest.approx((eps1 - jacobian) / (2.0 * math.sqrt(2.0)), rel=1e-12)
    assert details["noise_dimension"] == d * K
    assert details["regularization"] == lam
    assert details["calibration_strong_convexity"] == pytest.approx(lam + eta)
    assert details["effective_regularization"] == pytest.approx(lam + eta)
    assert cal.epsilon == eps
    # without the transfer term λ = 0.001 alone is on the Δ branch: 2·ln(1 + 1/(60·0.001))
    # = 5.74 > ε₁/2, so λ + Δ = 1/(Kn(e^{ε₁/(2(K−1))} − 1)) and ε_J = ε₁/2
    plain = transfer_calibration(
        n, d, epsilon=eps, transfer_strength=0.0, regularization=lam, task="multiclass", n_classes=K
    ).details
    assert plain["Delta"] > 0.0
    assert plain["effective_regularization"] == pytest.approx(
        1.0 / (K * n * math.expm1(eps1 / (2.0 * (K - 1)))), rel=1e-12
    )
    assert plain["beta"] < details["beta"]


def test_regression_calibration_is_the_hand_derived_one_at_lambda_plus_eta() -> None:
    n, d, lam, eta, eps, h = 20, 3, 0.001, 1.0, 1.0, 0.25
    details = transfer_calibration(
        n,
        d,
        epsilon=eps,
        transfer_strength=eta,
        regularization=lam,
        loss="huber",
        task="regression",
        h=h,
    ).details
    # c = 1: ε_J = ln(1 + 1/(20·1.001)) = 0.0487426 ≤ ε₁/2, Δ = 0; |ψ| ≤ h: β = ε′/(2h) = 2ε′
    eps1 = objective_budget(eps, n, d)
    jacobian = math.log1p(1.0 / (20 * 1.001))
    assert jacobian == pytest.approx(0.0487426, abs=1e-7)
    assert details["Delta"] == 0.0
    assert details["jacobian_epsilon"] == pytest.approx(jacobian, rel=1e-12)
    assert details["gradient_sensitivity"] == 2.0 * h
    assert details["beta"] == pytest.approx((eps1 - jacobian) / (2.0 * h), rel=1e-12)
    assert details["task"] == "regression"
    assert details["calibration_strong_convexity"] == pytest.approx(lam + eta)


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_the_centre_adds_eta_times_its_norm_to_the_certificates_bound_only(task: str) -> None:
    X, y = _data(task, n=60)
    source, eta = _source(task), 0.5
    n, d = X.shape
    opts = {k: v for k, v in _task(task).items() if k != "loss"}
    public = transfer_calibration(
        n,
        d,
        epsilon=1.0,
        transfer_strength=eta,
        regularization=0.05,
        loss=str(_task(task)["loss"]),
        **opts,
    )
    result = transfer_fit(
        X,
        y,
        source,
        epsilon=1.0,
        transfer_strength=eta,
        regularization=0.05,
        rng=np.random.default_rng(1),
        **_task(task),
    )
    before = public.details["certified_release"]
    after = result.details["certified_release"]
    assert after["linear_bound"] == pytest.approx(
        before["linear_bound"] + eta * float(np.linalg.norm(source)), rel=1e-12
    )
    assert after["epsilon"] == before["epsilon"]  # the same ε_r
    assert after["certificate_tolerance"] > before["certificate_tolerance"]
    for key in ("beta", "Delta", "jacobian_epsilon", "epsilon_objective"):
        assert result.details[key] == public.details[key]
    assert result.details["certificate_failure"]["log10_probability_bound"] < -30


# ---- the released noise --------------------------------------------------------------------


@pytest.mark.statistical
def test_multiclass_transfer_draws_the_hand_derived_law_in_dimension_dk() -> None:
    n, d, lam, eta, eps, runs = 60, 2, 0.05, 0.5, 1.0, 400
    X, y = _classes(n, d, seed=2)
    source = _source("multiclass", d)
    rng = np.random.default_rng(5)
    results = [
        transfer_fit(
            X,
            y,
            source,
            epsilon=eps,
            transfer_strength=eta,
            regularization=lam,
            rng=rng,
            task="multiclass",
            n_classes=K,
        )
        for _ in range(runs)
    ]
    # ε₁ = objective_budget(1, 60, 6); ε_J = 2·ln(1 + 1/(3·60·0.55)) = 0.020000 ≤ ε₁/2 (Δ = 0);
    # β = (ε₁ − ε_J)/(2√2) ≈ 0.34645
    beta = (objective_budget(eps, n, d * K) - 2.0 * math.log1p(1.0 / (3 * 60 * 0.55))) / (
        2.0 * math.sqrt(2.0)
    )
    assert results[0].details["beta"] == pytest.approx(beta, rel=1e-12)
    assert results[0].details["Delta"] == 0.0
    # b from the first-order condition of the centred objective at each release:
    # b = −Σ_i (p_i − e_{y_i})x_iᵀ − n(λ + η)C + nηC₀
    b = np.array(
        [
            -n * (multinomial.gradient(X, y, _coef(r), ridge=lam + eta) - eta * source)
            for r in results
        ]
    ).reshape(runs, d * K)
    norm_exponential_fits_only_at_the_right_scale(b, beta)


@pytest.mark.statistical
def test_regression_transfer_draws_the_hand_derived_law() -> None:
    n, d, lam, eta, eps, h, runs = 60, 3, 0.05, 0.5, 1.0, 0.5, 400
    X, y = _numbers(n, d, seed=4)
    source = _source("regression", d)
    rng = np.random.default_rng(6)
    results = [
        transfer_fit(
            X,
            y,
            source,
            epsilon=eps,
            transfer_strength=eta,
            regularization=lam,
            rng=rng,
            task="regression",
            loss="huber",
            h=h,
        )
        for _ in range(runs)
    ]
    # ε_J = ln(1 + 1/(60·0.55)) = 0.029853 ≤ ε₁/2 (Δ = 0); β = ε′/(2h) = ε′
    beta = objective_budget(eps, n, d) - math.log1p(1.0 / (60 * 0.55))
    assert results[0].details["beta"] == pytest.approx(beta, rel=1e-12)
    # b = Σ_i ψ(y_i − wᵀx_i)x_i − n(λ + η)w + nηu, from the first-order condition
    loss = RegressionHuberLoss(h=h)
    b = np.array(
        [
            -n * regression.regression_gradient(X, y, loss, _coef(r), lam + eta, -eta * source)
            for r in results
        ]
    )
    norm_exponential_fits_only_at_the_right_scale(b, beta)


# ---- a neighbouring pair ------------------------------------------------------------------

AUDIT_EPS, AUDIT_LAM, AUDIT_ETA, AUDIT_RUNS = 2.0, 10.0, 2.0, 1000
AUDIT_SOURCE = np.array([0.5])
AUDIT_X = np.ones((2, 1))
AUDIT_D, AUDIT_D_PRIME = np.array([1.0, 1.0]), np.array([-1.0, 1.0])


def _audit_releases(cal: Calibration, y: FloatArray, seed: int) -> FloatArray:
    """Independent releases of the centred regression objective under ``cal``'s plan."""
    rng = np.random.default_rng(seed)
    return np.array(
        [
            _coef_of(
                _run_task(
                    AUDIT_X,
                    y,
                    cal,
                    regularization=AUDIT_LAM,
                    centre=AUDIT_SOURCE,
                    eta=AUDIT_ETA,
                    rng=rng,
                )
            )[0]
            for _ in range(AUDIT_RUNS)
        ]
    )


def _coef_of(model: object) -> FloatArray:
    return np.asarray(model.coef, dtype=np.float64)  # type: ignore[attr-defined]


def _audit(cal: Calibration, beta: float, seed: int) -> float:
    w_d = _audit_releases(cal, AUDIT_D, seed)
    w_dp = _audit_releases(cal, AUDIT_D_PRIME, seed + 1)
    assert np.max(np.abs(w_d)) < 0.5  # every residual beyond h (module doc)
    assert np.max(np.abs(w_dp)) < 0.5
    ridge = 2 * (AUDIT_LAM + AUDIT_ETA)
    upper, lower, scale = 3.0 / ridge, 2.0 / ridge, 1.0 / (beta * ridge)
    thresholds = [upper + k * scale for k in (0.0, 0.5, 1.0)] + [
        lower - k * scale for k in (0.0, 0.5, 1.0)
    ]
    return epsilon_lower_bound(w_d, w_dp, confidence=0.99, thresholds=thresholds)


@pytest.mark.heavy  # 4000 certified solves (≈ 15 s); the KS tests above guard the law
@pytest.mark.statistical
def test_regression_transfer_audit_and_its_half_noise_control() -> None:
    public = transfer_calibration(
        2,
        1,
        epsilon=AUDIT_EPS,
        transfer_strength=AUDIT_ETA,
        regularization=AUDIT_LAM,
        loss="huber",
        task="regression",
        h=0.5,
    )
    cal = _centred_task_plan(public, AUDIT_SOURCE, AUDIT_ETA)
    eps_prime = objective_budget(AUDIT_EPS, 2, 1) - math.log1p(1.0 / 24.0)
    assert cal.details["Delta"] == 0.0
    assert cal.details["beta"] == pytest.approx(eps_prime, rel=1e-12)  # β = ε′/(2h), 2h = 1
    beta = float(cal.details["beta"])
    # the public entry point runs this very plan
    ran = transfer_fit(
        AUDIT_X,
        AUDIT_D,
        AUDIT_SOURCE,
        epsilon=AUDIT_EPS,
        transfer_strength=AUDIT_ETA,
        regularization=AUDIT_LAM,
        rng=np.random.default_rng(1),
        task="regression",
        loss="huber",
        h=0.5,
    )
    assert ran.details["beta"] == beta
    lower = _audit(cal, beta, 40)
    assert lower < eps_prime < AUDIT_EPS
    assert cal.plan is not None
    half = dataclasses.replace(cal, plan=dataclasses.replace(cal.plan, beta=2.0 * beta))  # type: ignore[call-arg]
    caught = _audit(half, 2.0 * beta, 42)
    assert AUDIT_EPS < caught <= 2.0 * eps_prime


# ---- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "source", "message"),
    [
        ("multiclass", np.zeros((4, K)), "3 × 4 finite weights"),
        ("multiclass", np.zeros(4 * K), "3 × 4 finite weights"),
        ("multiclass", np.full((K, 4), np.nan), "3 × 4 finite weights"),
        ("regression", np.zeros(3), "4 finite weights"),
        ("regression", np.array([0.0, np.inf, 0.0, 0.0]), "4 finite weights"),
    ],
)
def test_a_source_of_the_wrong_shape_is_refused(
    task: str, source: FloatArray, message: str
) -> None:
    X, y = _data(task, n=30)
    with pytest.raises(ValueError, match=message):
        transfer_fit(
            X, y, source, epsilon=1.0, transfer_strength=1.0, regularization=0.05, **_task(task)
        )


def test_the_squared_loss_and_class_losses_are_refused_for_numbers() -> None:
    X, y = _numbers(30, 4, seed=1)
    with pytest.raises(ValueError, match="huber"):
        transfer_fit(
            X,
            y,
            np.zeros(4),
            epsilon=1.0,
            transfer_strength=1.0,
            regularization=0.05,
            task="regression",
            loss="squared",
        )
    with pytest.raises(ValueError, match="regression"):
        transfer_calibration(
            30,
            4,
            epsilon=1.0,
            transfer_strength=1.0,
            regularization=0.05,
            task="regression",
            loss="logistic",
        )
