"""End-to-end noise laws: the noise each mechanism really injected, recovered from its
released coefficients, follows the law derived by hand for that setting (KS tests, seeded).
The reference laws (β, σ, Δ) are worked out in the tests from the papers' formulas, never read
from ``calibrate()``, so a wrong calibration fails here too; each law is also checked to
reject the same noise at half and at twice the scale (the tests have power).

The objective-perturbation mechanisms calibrate their objective at ε₁ = ε − ε_r, ε_r paying
for the certified release's noise Z (:mod:`service.dp.optimize.certified`, ε₁ derived by hand in
:mod:`tests.unit.dp._budget`). The recovered b then also carries n(λ + Δ)·Z and the 2⁻³² grid's
rounding: here E‖n(λ + Δ)Z‖ ≤ 5·10⁻³ against E‖b‖ ≥ 14, invisible to the KS tests."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import stats

from service.dp import calibrate, fit
from service.dp.core.base import Calibration, Problem
from service.dp.core.losses import get_loss
from service.dp.mechanisms import get_mechanism
from tests.unit.dp._budget import objective_budget

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
    X: FloatArray, y: FloatArray, problem: Problem, extra: float, coefs: FloatArray
) -> FloatArray:
    """b from the first-order condition of J + bᵀw/n + (Δ/2)‖w‖² at each released w:
    b = −Σ_i l′(y_i wᵀx_i) y_i x_i − n(λ + Δ) w, with the hand-derived Δ = ``extra``."""
    loss = get_loss(problem.loss)
    n = X.shape[0]
    ridge = problem.regularization + extra
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


def _gamma_law_fits_only_at_the_right_scale(norms: FloatArray, d: int, beta: float) -> None:
    assert stats.kstest(norms, stats.gamma(d, scale=1 / beta).cdf).pvalue > P_MIN
    for wrong in (0.5, 2.0):  # half and twice the noise are both rejected
        assert stats.kstest(norms, stats.gamma(d, scale=wrong / beta).cdf).pvalue < P_MIN


@pytest.mark.parametrize(
    ("lam", "branch", "beta", "extra"),
    [
        # n = 60, logistic c = 1/4, ε = 0.5, d = 3: the objective's budget is ε₁ = ε(1 − κ),
        # τ₀ = 1e-10 + 8·63u = 1.0005595524e-10, √(nτ₀) = 7.7481335265e-5,
        # κ = 7.7475332373e-5, ε₁ = 0.4999612623338 (checked in the test).
        # λ = 0.05: ε_J = ln(1 + 0.25/3) = 0.0800427077 ≤ ε₁/2, Δ = 0,
        #   β = (0.4999612623 − 0.0800427077)/2 = 0.2099592773
        (0.05, "no_extra_regularization", 0.2099592773, 0.0),
        # λ = 0.0005: ln(1 + 0.25/0.03) = 2.23 > ε₁/2, so Δ = c/(n(e^{ε₁/2} − 1)) − λ
        #   = 0.25/(60·0.2840005469) − 0.0005 = 0.0141713333 and β = (ε₁/2)/2 = 0.1249903156
        (0.0005, "extra_regularization", 0.1249903156, 0.0141713333),
    ],
)
def test_objective_perturbation_noise_is_the_hand_derived_law(
    lam: float, branch: str, beta: float, extra: float
) -> None:
    X, y = _data(60, 3, seed=2)
    coefs, cal, problem = _runs(
        "objective_perturbation", X, y, runs=1000, seed=3, epsilon=0.5, regularization=lam
    )
    assert cal.details["branch"] == branch
    assert cal.details["epsilon_objective"] == pytest.approx(0.4999612623338, rel=1e-12)
    assert objective_budget(0.5, 60, 3) == pytest.approx(0.4999612623338, rel=1e-12)
    b = _recovered_noise(X, y, problem, extra, coefs)
    _gamma_law_fits_only_at_the_right_scale(np.linalg.norm(b, axis=1), 3, beta)


def test_generalized_pure_noise_is_the_hand_derived_law() -> None:
    X, y = _data(60, 3, seed=4)
    coefs, _cal, problem = _runs(
        "generalized_objective_perturbation",
        X,
        y,
        runs=1000,
        seed=5,
        epsilon=0.5,
        regularization=0.01,
    )
    # ε₁ = 0.4999612623338 (n = 60, d = 3, ε = 0.5, as above); Kifer's Δ_K = 2c/ε₁
    # = 1.0000774813 (Δ = Δ_K/60 = 0.0166679580 on PrivFit's scale);
    # ε_J = ln(1 + 0.25/(0.6 + 1.0000774813)) = 0.1451754661;
    # β = (0.4999612623 − 0.1451754661)/2 = 0.1773928981
    eps1 = objective_budget(0.5, 60, 3)
    assert 0.5 / eps1 == pytest.approx(1.0000774813, rel=1e-10)
    b = _recovered_noise(X, y, problem, 0.5 / eps1 / 60.0, coefs)
    _gamma_law_fits_only_at_the_right_scale(np.linalg.norm(b, axis=1), 3, 0.1773928981)


# n = 60, λ = 0.01, ε = 1, δ = 1e-4, d = 3, logistic c = 1/4; the objective's budget is
# ε₁ = ε(1 − κ) with κ = 7.7475332373e-5 (as above): ε₁ = 0.9999225246676.
# GOP: ε_J = ln(1 + 0.25/0.6) = 0.3483066943 ≤ ε₁/2, Δ = 0, ε̃ = ε₁ − ε_J = 0.6516158304;
#   q = χ²_3 quantile at 1 − 1e-4 = 21.1075134662, σ* = (√q + √(q + 2ε̃))/ε̃ = 14.3156286514.
# generalized: Δ_K = 2c/ε₁ = 0.5000387407 (Δ = Δ_K/60 = 0.0083339790);
#   ε_J = ln(1 + 0.25/(0.6 + 0.5000387407)) = 0.2047878909, ε_n = ε₁ − ε_J = 0.7951346338;
#   u with min(4Φ̄(u), e^{−u²/2}) = 1e-4: 4Φ̄(u) = 1e-4 at u = 4.0556269811
#   (there e^{−u²/2} = 2.7e-4, so the Gaussian-tail bound is the smaller);
#   σ = (u + √(u² + 2ε_n))/ε_n = 10.4419905404.
GAUSSIAN_LAWS = {
    "gaussian_objective_perturbation": (14.3156286514, 0.0),
    "generalized_objective_perturbation": (10.4419905404, 0.5 / 0.9999225246676 / 60.0),
}


@pytest.mark.parametrize("name", sorted(GAUSSIAN_LAWS))
def test_gaussian_noise_is_the_hand_derived_law(name: str) -> None:
    X, y = _data(60, 3, seed=6)
    coefs, _cal, problem = _runs(
        name, X, y, runs=1000, seed=7, epsilon=1.0, delta=1e-4, regularization=0.01
    )
    sigma, extra = GAUSSIAN_LAWS[name]
    assert objective_budget(1.0, 60, 3) == pytest.approx(0.9999225246676, rel=1e-12)
    b = _recovered_noise(X, y, problem, extra, coefs)
    assert stats.kstest(b.ravel(), stats.norm(scale=sigma).cdf).pvalue > P_MIN
    assert stats.kstest((b**2).sum(axis=1) / sigma**2, stats.chi2(3).cdf).pvalue > P_MIN
    for wrong in (0.5, 2.0):
        assert stats.kstest(b.ravel(), stats.norm(scale=wrong * sigma).cdf).pvalue < P_MIN
