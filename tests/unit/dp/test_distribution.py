"""End-to-end noise laws: the noise each mechanism really injected, recovered from its
released coefficients, follows the calibrated law (KS tests, seeded)."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import stats

from service.dp import calibrate, fit
from service.dp.base import Calibration, Problem
from service.dp.losses import get_loss
from service.dp.mechanisms import get_mechanism

pytestmark = pytest.mark.statistical

P_MIN = 1e-4
FloatArray = NDArray[np.float64]


def _data(n: int, d: int, seed: int) -> tuple[FloatArray, FloatArray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def _runs(
    name: str,
    X: FloatArray,
    y: FloatArray,
    *,
    runs: int,
    seed: int,
    **kw: object,
) -> tuple[FloatArray, Calibration, Problem]:
    """Released coefficients of ``runs`` seeded runs (one calibration, as ``fit`` does)."""
    mech = get_mechanism(name)
    n, d = X.shape
    problem = Problem(
        mechanism=name,
        n=n,
        d=d,
        epsilon=float(kw.pop("epsilon")),  # type: ignore[arg-type]
        delta=float(kw.pop("delta", 0.0)),  # type: ignore[arg-type]
        loss=str(kw.pop("loss", "logistic")),
        regularization=float(kw.pop("regularization")),  # type: ignore[arg-type]
        params=kw,
    )
    cal = mech.calibrate(mech.validate_params(problem))
    rng = np.random.default_rng(seed)
    coefs = np.array(
        [mech.run(X, y, problem, cal, rng=rng, progress=None).coef for _ in range(runs)]  # type: ignore[attr-defined]
    )
    return coefs, cal, problem


def _recovered_noise(
    X: FloatArray, y: FloatArray, problem: Problem, cal: Calibration, coefs: FloatArray
) -> FloatArray:
    """b from the first-order condition of J + bᵀw/n + (Δ/2)‖w‖² at each released w:
    b = −Σ_i l′(y_i wᵀx_i) y_i x_i − n(λ + Δ) w."""
    loss = get_loss(problem.loss)
    n = X.shape[0]
    ridge = problem.regularization + float(cal.details["Delta"])
    z = y[None, :] * (coefs @ X.T)  # runs × n margins
    b: FloatArray = -(loss.derivative(z) * y[None, :]) @ X - n * ridge * coefs
    return b


def test_output_perturbation_noise_norm_is_gamma() -> None:
    X, y = _data(40, 3, seed=0)
    n, lam, eps = 40, 0.05, 2.0
    exact = fit(X, y, "non_private", epsilon=1.0, regularization=lam).coef
    assert exact is not None
    coefs, cal, _ = _runs(
        "output_perturbation", X, y, runs=1500, seed=1, epsilon=eps, regularization=lam
    )
    released_noise = coefs - exact
    norms = np.linalg.norm(released_noise, axis=1)
    # ‖b‖ ~ Gamma(shape d, scale 2/(nλε)) = Gamma(3, 0.5)
    law = stats.gamma(3, scale=2.0 / (n * lam * eps))
    assert stats.kstest(norms, law.cdf).pvalue > P_MIN
    # the direction is uniform: (u₁ + 1)/2 ~ Beta(1, 1) for d = 3
    u1 = released_noise[:, 0] / norms
    assert stats.kstest((u1 + 1) / 2, "uniform").pvalue > P_MIN
    # a mis-scaled law is rejected by the same test (the test has power)
    assert stats.kstest(norms, stats.gamma(3, scale=0.4).cdf).pvalue < P_MIN
    assert cal.details["beta"] == pytest.approx(n * lam * eps / 2)
    # the dry run's expected noise norm is the mean: Gamma(3, 0.5) has mean 1.5, and with
    # 1500 runs the standard error is √3·0.5/√1500 = 0.022
    dry = calibrate("output_perturbation", n=n, d=3, epsilon=eps, regularization=lam)
    assert dry.expected_noise_norm == pytest.approx(1.5)
    assert abs(float(norms.mean()) - 1.5) < 0.1


@pytest.mark.parametrize(
    ("lam", "branch"), [(0.05, "no_extra_regularization"), (0.0005, "extra_regularization")]
)
def test_objective_perturbation_noise_is_the_calibrated_law(lam: float, branch: str) -> None:
    X, y = _data(60, 3, seed=2)
    coefs, cal, problem = _runs(
        "objective_perturbation", X, y, runs=1000, seed=3, epsilon=0.5, regularization=lam
    )
    assert cal.details["branch"] == branch
    b = _recovered_noise(X, y, problem, cal, coefs)
    beta = float(cal.details["beta"])
    assert (
        stats.kstest(np.linalg.norm(b, axis=1), stats.gamma(3, scale=1 / beta).cdf).pvalue > P_MIN
    )


def test_generalized_pure_noise_is_the_calibrated_law() -> None:
    X, y = _data(60, 3, seed=4)
    coefs, cal, problem = _runs(
        "generalized_objective_perturbation",
        X,
        y,
        runs=1000,
        seed=5,
        epsilon=0.5,
        regularization=0.01,
    )
    b = _recovered_noise(X, y, problem, cal, coefs)
    beta = float(cal.details["beta"])
    assert (
        stats.kstest(np.linalg.norm(b, axis=1), stats.gamma(3, scale=1 / beta).cdf).pvalue > P_MIN
    )


@pytest.mark.parametrize(
    "name", ["generalized_objective_perturbation", "gaussian_objective_perturbation"]
)
def test_gaussian_noise_is_the_calibrated_law(name: str) -> None:
    X, y = _data(60, 3, seed=6)
    coefs, cal, problem = _runs(
        name, X, y, runs=1000, seed=7, epsilon=1.0, delta=1e-4, regularization=0.01
    )
    b = _recovered_noise(X, y, problem, cal, coefs)
    sigma = float(cal.details["sigma"])
    assert stats.kstest(b.ravel(), stats.norm(scale=sigma).cdf).pvalue > P_MIN
    assert stats.kstest((b**2).sum(axis=1) / sigma**2, stats.chi2(3).cdf).pvalue > P_MIN
