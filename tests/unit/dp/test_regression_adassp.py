"""``adassp`` (Wang 2018, Alg. 2, replace-one): the noise scales by hand, the sensitivities by
brute force, the released noise's law (KS), the composition against dp-accounting, an empirical
audit with its half-noise control, RMSE on synthetic data, and refusals.

Hand-derived references. ε = 1, δ = 10⁻⁵: the largest μ with δ(ε; μ) ≤ δ on the GDP curve
δ(ε; μ) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) is μ = 0.268051123211294 (40-digit mpmath bisection,
as in test_noisy_gd.py). Three releases with the same multiplier z compose to √3/z-GDP, so
z = √3/μ = 6.46164353582496, and σ₁ = z (λ_min, sensitivity 1), σ₂ = √2·z = 9.13818... (XᵀX's
diagonal, Frobenius sensitivity √2), σ₃ = 2z = 12.9232870716499 (Xᵀy, sensitivity 2).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import optimize, stats

from service.dp import calibrate, fit
from service.dp.core.validation import PrivacyParameterError
from service.dp.data import clipping
from service.dp.mechanisms import adassp
from service.dp.noise import lattice
from service.dp.optimize.solvers import ConvergenceError
from tests.unit.dp._audit import epsilon_lower_bound

MU_1_1E5 = 0.268051123211294
Z_1_1E5 = math.sqrt(3.0) / MU_1_1E5


def _plan(n: int, d: int, epsilon: float, delta: float, **params: Any) -> adassp.AdaSSPPlan:
    cal = calibrate(
        "adassp",
        n=n,
        d=d,
        epsilon=epsilon,
        delta=delta,
        loss="squared",
        regularization=1e-6,
        task="regression",
        **params,
    )
    assert isinstance(cal.plan, adassp.AdaSSPPlan)
    return cal.plan


def _exact_delta(epsilon: float, mu: float) -> float:
    return float(
        stats.norm.cdf(-epsilon / mu + mu / 2.0)
        - math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2.0)
    )


def _gdp_epsilon(mu: float, delta: float) -> float:
    return float(optimize.brentq(lambda e: _exact_delta(e, mu) - delta, 0.0, 50.0))


def _rows(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1), 1.0)[:, None] * 1.01
    w = rng.standard_normal(d)
    w /= np.linalg.norm(w)
    y = np.clip(0.8 * X @ w + 0.1 * rng.standard_normal(n), -1.0, 1.0)
    return X, y


# ---- noise scales by hand -------------------------------------------------------------------


def test_the_noise_scales_are_the_hand_derived_ones() -> None:
    plan = _plan(1000, 5, 1.0, 1e-5)
    assert plan.noise_multiplier == pytest.approx(Z_1_1E5, rel=1e-6)
    assert plan.noise_multiplier >= Z_1_1E5 * (1 - 1e-12)  # never below the exact GDP need
    assert plan.sigma_eigenvalue == plan.noise_multiplier
    assert plan.sigma_gram == pytest.approx(math.sqrt(2.0) * Z_1_1E5, rel=1e-6)
    assert plan.sigma_moment == pytest.approx(12.9232870716499, rel=1e-6)
    # the floating-point margins, by hand: E(n) = γ_n·n + √d·n·η for Xᵀy, E_G = γ_n·n + d·n·η
    n, d, z = 1000, 5, Fraction(plan.noise_multiplier)
    nu = Fraction(n, 2**53)
    e_sum = nu / (1 - nu) * n + 3 * n * Fraction(1, 2**1074)  # ⌈√5⌉ = 3
    e_gram = nu / (1 - nu) * n + d * n * Fraction(1, 2**1074)
    assert plan.sigma_moment_added == clipping.round_up(z * (2 + 2 * e_sum))
    assert plan.sigma_gram_added == clipping.round_up(z * (Fraction(adassp.SQRT2_UP) + 2 * e_gram))
    tau = Fraction(2.0**-20 + 2.0**10 * d * n * 2.0**-53)
    assert plan.sigma_eigenvalue_added == clipping.round_up(z * (1 + 2 * e_gram + 2 * tau))
    # the off-diagonal entries get σ₂/√2 (rounded up): the whitened sensitivity is ‖M‖_F/σ₂
    assert plan.sigma_gram_off_diagonal_added >= plan.sigma_gram_added / math.sqrt(2.0)
    assert plan.sigma_gram_off_diagonal_added == pytest.approx(
        plan.sigma_gram_added / math.sqrt(2.0), rel=1e-15
    )
    assert plan.sigma_moment_added / plan.sigma_moment - 1 < 1e-9


def test_the_sensitivities_hold_and_are_attained() -> None:
    """‖xxᵀ − x′x′ᵀ‖_F ≤ √2, ‖xy − x′y′‖ ≤ 2, |Δλ_min| ≤ 1 over random replace-one pairs, and
    the extreme pairs of the module docstring attain them."""
    rng = np.random.default_rng(5)
    worst = [0.0, 0.0, 0.0]
    for _ in range(400):
        d = int(rng.integers(1, 5))
        X = rng.standard_normal((6, d))
        X /= np.maximum(np.linalg.norm(X, axis=1), 1.0)[:, None]
        y = rng.uniform(-1, 1, 6)
        x2 = rng.standard_normal(d)
        x2 /= max(float(np.linalg.norm(x2)), 1.0)
        X2, y2 = X.copy(), y.copy()
        X2[0], y2[0] = x2, rng.uniform(-1, 1)
        worst[0] = max(worst[0], float(np.linalg.norm(X.T @ X - X2.T @ X2)))
        worst[1] = max(worst[1], float(np.linalg.norm(X.T @ y - X2.T @ y2)))
        shift = np.linalg.eigvalsh(X.T @ X)[0] - np.linalg.eigvalsh(X2.T @ X2)[0]
        worst[2] = max(worst[2], abs(float(shift)))
    assert worst[0] <= math.sqrt(2.0) + 1e-12
    assert worst[1] <= 2.0 + 1e-12
    assert worst[2] <= 1.0 + 1e-12
    e1, e2 = np.eye(2)
    assert np.linalg.norm(np.outer(e1, e1) - np.outer(e2, e2)) == pytest.approx(math.sqrt(2.0))
    assert np.linalg.norm(e1 * 1.0 - e1 * -1.0) == 2.0
    base = np.diag([0.0, 5.0])  # λ_min = 0, then adding e1e1ᵀ raises it to 1
    assert np.linalg.eigvalsh(base + np.outer(e1, e1))[0] - np.linalg.eigvalsh(base)[0] == 1.0


# ---- the accounting ---------------------------------------------------------------------------


def _pld(multiplier: float, eps: float, delta: float) -> float:
    """ε at δ of three Gaussian releases with multiplier z, by dp-accounting's PLD directly."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4 * eps)
    acc.compose(dp_event.GaussianDpEvent(multiplier), 3)
    return float(acc.get_epsilon(delta))


def test_the_composition_agrees_with_dp_accounting() -> None:
    for eps, delta in ((1.0, 1e-5), (0.3, 1e-6), (4.0, 1e-7)):
        plan = _plan(5000, 8, eps, delta)
        z = plan.noise_multiplier
        # the exact GDP curve of √3/z: within (ε, δ)
        assert _exact_delta(eps, math.sqrt(3.0) / z) <= delta * (1 + 1e-9)

        assert _pld(z, eps, delta) <= eps
        assert _pld(z * 0.99, eps, delta) > eps  # tight: 1 % less noise overspends
        # Wang's split of (ε, δ) in three classical Gaussian mechanisms needs far more noise
        classical = math.sqrt(2.0 * math.log(1.25 * 3.0 / delta)) / (eps / 3.0)
        if eps <= 1.0:
            assert z < 0.5 * classical


# ---- the released noise -----------------------------------------------------------------------


def test_the_released_noise_has_the_planned_law() -> None:
    """Each release minus its exact statistic, divided by the σ added, is N(0, 1) (KS); with
    half the σ the same test rejects."""
    n, d, runs = 40, 3, 300
    X, y = _rows(n, d, 1)
    plan = _plan(n, d, 1.0, 1e-5)
    gram, moment = X.T @ X, X.T @ y
    lam = float(np.linalg.eigvalsh(gram)[0])
    rng = np.random.default_rng(2)
    eig: list[float] = []
    diag: list[float] = []
    off: list[float] = []
    mom: list[float] = []
    for _ in range(runs):
        lam_noisy, g, b = adassp.noisy_statistics(X, y, plan, rng=rng)
        assert np.array_equal(g, g.T)
        eig.append((lam_noisy - lam) / plan.sigma_eigenvalue_added)
        diag.extend((np.diag(g) - np.diag(gram)) / plan.sigma_gram_added)
        upper = np.triu_indices(d, 1)
        off.extend((g[upper] - gram[upper]) / plan.sigma_gram_off_diagonal_added)
        mom.extend((b - moment) / plan.sigma_moment_added)
    for sample in (eig, diag, off, mom):
        values = np.asarray(sample)
        assert stats.kstest(values, "norm").pvalue > 1e-3
        assert stats.kstest(2.0 * values, "norm").pvalue < 1e-6  # σ/2 would be caught


def test_a_very_noisy_release_uses_the_coarser_grid_with_the_planned_law() -> None:
    """At ε = 0.02 every σ is far above 16: the releases lie on the grid sγ (s = 2^k,
    gaussian_rounds.grid_scale) and keep their law."""
    from service.dp.federated.gaussian_rounds import grid_scale

    n, d = 40, 3
    X, y = _rows(n, d, 12)
    plan = _plan(n, d, 0.02, 1e-6)
    scale = grid_scale(plan.sigma_moment_added)
    assert scale > 1
    rng = np.random.default_rng(13)
    noise = []
    for _ in range(150):
        _, _, b = adassp.noisy_statistics(X, y, plan, rng=rng)
        cells = b / (scale * lattice.GRID)
        assert np.array_equal(cells, np.round(cells))  # on the coarser grid
        noise.extend((b - X.T @ y) / plan.sigma_moment_added)
    values = np.asarray(noise)
    assert stats.kstest(values, "norm").pvalue > 1e-3
    assert stats.kstest(2.0 * values, "norm").pvalue < 1e-6


# ---- empirical privacy -------------------------------------------------------------------------

#: Two rows x = 1 (d = 1); D has labels (1, 1), D′ replaces the first by −1: Xᵀy moves by the
#: full sensitivity 2 while XᵀX and λ_min stay equal, so the moment release alone separates
#: them. It is a (1/z)-GDP mechanism on its own (μ₁ = 1/z): at (ε, δ) = (4, 0.05) its own
#: ε at δ is ε₁ = 1.715 (GDP curve); with half its σ, ε = 5.00.
X_PAIR = np.ones((2, 1))
Y_D = np.array([1.0, 1.0])
Y_D_PRIME = np.array([-1.0, 1.0])
RUNS_AUDIT = 600


def _audit_plan() -> adassp.AdaSSPPlan:
    return _plan(2, 1, 4.0, 0.05)


def _thresholds(sigma: float) -> list[float]:
    """Events {A > t} and {A ≤ t} around both means, fixed before sampling (power only)."""
    return [2.0 - k * sigma for k in (0.0, 0.5, 1.0, 1.5)] + [k * sigma for k in (0.5, 1.0, 1.5)]


def _moments(plan: adassp.AdaSSPPlan, y: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array(
        [adassp.noisy_statistics(X_PAIR, y, plan, rng=rng)[2][0] for _ in range(RUNS_AUDIT)]
    )


@pytest.mark.statistical
def test_the_audit_stays_below_the_release_guarantee_and_catches_half_the_noise() -> None:
    plan = _audit_plan()
    z = plan.noise_multiplier
    own = _gdp_epsilon(1.0 / z, 0.05)
    assert own == pytest.approx(1.715, abs=1e-3)
    sigma = plan.sigma_moment_added
    lower = epsilon_lower_bound(
        _moments(plan, Y_D, 10),
        _moments(plan, Y_D_PRIME, 11),
        confidence=0.99,
        delta=0.05,
        thresholds=_thresholds(sigma),
    )
    assert lower < own
    half = dataclasses.replace(plan, sigma_moment_added=sigma / 2.0)
    caught = epsilon_lower_bound(
        _moments(half, Y_D, 12),
        _moments(half, Y_D_PRIME, 13),
        confidence=0.99,
        delta=0.05,
        thresholds=_thresholds(sigma / 2.0),
    )
    assert own < caught <= _gdp_epsilon(2.0 / z, 0.05)


# ---- utility --------------------------------------------------------------------------------


def test_rmse_beats_predicting_zero_at_epsilon_one() -> None:
    X, y = _rows(20_000, 10, 3)
    result = fit(
        X,
        y,
        "adassp",
        epsilon=1.0,
        delta=1e-6,
        loss="squared",
        regularization=1e-6,
        task="regression",
        rng=np.random.default_rng(4),
    )
    exact = fit(
        X, y, "non_private", epsilon=1.0, loss="squared", regularization=1e-6, task="regression"
    )
    assert result.coef is not None
    assert exact.coef is not None
    rmse = float(np.sqrt(np.mean((X @ result.coef - y) ** 2)))
    best = float(np.sqrt(np.mean((X @ exact.coef - y) ** 2)))
    zero = float(np.sqrt(np.mean(y**2)))
    assert rmse < 0.5 * zero
    assert rmse < 1.1 * best
    assert (result.epsilon, result.delta) == (1.0, 1e-6)


def test_a_prepared_design_fits_as_the_raw_arrays_do() -> None:
    from service.dp import prepare_design

    X, y = _rows(500, 4, 14)
    design = prepare_design(X, y, "regression", 1)
    kwargs: dict[str, object] = {
        "epsilon": 1.0,
        "delta": 1e-6,
        "loss": "squared",
        "regularization": 1e-4,
        "task": "regression",
    }
    a = fit(design, None, "adassp", rng=np.random.default_rng(15), **kwargs)  # type: ignore[arg-type]
    b = fit(X, y, "adassp", rng=np.random.default_rng(15), **kwargs)  # type: ignore[arg-type]
    assert np.array_equal(np.asarray(a.coef), np.asarray(b.coef))


def test_the_work_estimate_is_the_gram_matrix() -> None:
    from service.dp.analysis.work import fit_work

    assert fit_work("adassp", 30_000, 100, {}) == 30_000 * 100 * 101 + 10 * 100**3


def test_the_ridge_rule_by_hand() -> None:
    plan = _plan(1000, 4, 1.0, 1e-5)
    t = math.sqrt(2.0 * math.log(3.0 / 0.05))
    assert plan.tail == t
    bound = plan.sigma_gram_added * (2.0 * 2.0 + t)
    assert adassp.ridge_rule(-5.0, plan) == pytest.approx(bound)  # no curvature seen
    big = bound + plan.sigma_eigenvalue_added * t + 1.0
    assert adassp.ridge_rule(big, plan) == 0.0  # the data's curvature dominates the noise


# ---- the eigenvalue certificate -------------------------------------------------------------


def test_the_min_eigenvalue_is_certified_or_refused() -> None:
    X, _ = _rows(500, 6, 8)
    A = X.T @ X
    A = np.triu(A) + np.triu(A, 1).T
    lam = adassp.certified_min_eigenvalue(A, adassp.eigenvalue_tolerance(500, 6))
    assert lam == float(np.linalg.eigh(A)[0][0])
    assert lam == pytest.approx(float(np.linalg.eigvalsh(A)[0]), rel=1e-12)
    with pytest.raises(ConvergenceError, match="could not be certified"):
        adassp.certified_min_eigenvalue(A, 1e-30)


# ---- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"delta": 0.0}, "needs"),
        ({"loss": "huber"}, "squared loss"),
        ({"rho": 1.5}, "rho"),
        ({"n": adassp.MAX_ROWS + 1}, "at most"),
        ({"task": "binary", "loss": "logistic"}, "does not fit binary labels"),
    ],
)
def test_refusals(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "n": 100,
        "d": 3,
        "epsilon": 1.0,
        "delta": 1e-6,
        "loss": "squared",
        "regularization": 1e-3,
        "task": "regression",
    }
    args.update(kwargs)
    with pytest.raises(PrivacyParameterError, match=message):
        calibrate("adassp", **args)  # type: ignore[arg-type]


def test_labels_outside_the_unit_interval_are_refused_before_any_noise() -> None:
    X, y = _rows(50, 3, 9)
    y[3] = 1.5
    with pytest.raises(ValueError, match=r"\[-1, 1\]\); 1 entries do not"):
        fit(
            X,
            y,
            "adassp",
            epsilon=1.0,
            delta=1e-6,
            loss="squared",
            regularization=1e-3,
            task="regression",
        )
