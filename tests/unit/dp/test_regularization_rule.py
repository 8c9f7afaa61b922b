"""The ``"auto"`` λ rule (service/dp/analysis/regularization.py): its value in hand-computed
cases (the numbers below are worked out from the docstring's formulas, not by calling the rule
twice), monotonicity in n, ε and d, clamping to the service's range, and its refusals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import special, stats

from service.domain import ranges
from service.dp.analysis import regularization as rule
from service.dp.analysis.regularization import AUTO_MECHANISMS, auto_regularization

R, A = 10.0, 0.01  # the calibrated constants, restated: changing them must be deliberate


def test_the_calibrated_constant_and_the_bounds_are_the_services() -> None:
    assert rule.NORM_CONSTANT == R
    assert rule.ESTIMATION_WEIGHT == A
    assert rule.LAMBDA_BOUNDS == (ranges.MIN_REGULARIZATION, ranges.MAX_REGULARIZATION)


def test_objective_perturbation_by_hand() -> None:
    # n = 10_000, d = 9, ε = 1: m₂ = 4·9·10/1 = 360;
    # λ = √(4·0.01·10_000 + 720)/(10_000·10) = √1120/100_000 = 33.466…/100_000
    choice = auto_regularization("objective_perturbation", n=10_000, d=9, epsilon=1.0)
    assert choice.regularization == pytest.approx(math.sqrt(1120.0) / 100_000.0, rel=1e-14)
    assert choice.regularization == pytest.approx(3.3466e-4, rel=1e-4)
    assert choice.terms["m2"] == 360.0
    assert not choice.clamped
    # n = 100, d = 1, ε = 0.1: m₂ = 4·1·2/0.01 = 800; λ = √(4 + 1600)/(100·10) = √1604/1000
    small = auto_regularization("objective_perturbation", n=100, d=1, epsilon=0.1)
    assert small.regularization == pytest.approx(math.sqrt(1604.0) / 1000.0, rel=1e-14)


def test_huber_changes_nothing_for_objective_but_enters_output_perturbation() -> None:
    logistic = auto_regularization("objective_perturbation", n=5000, d=20, epsilon=0.5)
    huber = auto_regularization(
        "objective_perturbation", n=5000, d=20, epsilon=0.5, loss="huber", params={"h": 0.1}
    )
    assert huber.regularization == logistic.regularization
    assert huber.inputs["c"] == 5.0  # 1/(2h)
    out_l = auto_regularization("output_perturbation", n=5000, d=20, epsilon=0.5)
    out_h = auto_regularization(
        "output_perturbation", n=5000, d=20, epsilon=0.5, loss="huber", params={"h": 0.1}
    )
    assert out_h.regularization > out_l.regularization  # more curvature, more noise cost


def test_output_perturbation_root_by_hand() -> None:
    # Choose n, d, ε so that the cubic (R²/2)λ³ − pλ − q has a known root. With n = 1000, d = 4,
    # ε = 1, c = 1/4: p = 2·0.01/1000 + 2·4·5/10⁶ = 6e-5, q = 4·0.25·5/10⁶ = 5e-6, a = 50.
    a, p, q = 50.0, 6e-5, 5e-6
    lam = auto_regularization("output_perturbation", n=1000, d=4, epsilon=1.0).regularization
    assert a * lam**3 - p * lam - q == pytest.approx(0.0, abs=1e-12 * q)
    # the unique positive root of the same cubic, found independently
    roots = np.roots([a, 0.0, -p, -q])
    positive = [float(r.real) for r in roots if abs(r.imag) < 1e-12 and r.real > 0]
    assert len(positive) == 1
    assert lam == pytest.approx(positive[0], rel=1e-10)


def test_gaussian_objective_by_hand() -> None:
    # GOP's σ* = (√q + √(q + 2ε))/ε, q the χ²_d quantile at 1 − δ; m₂ = dσ*²
    n, d, eps, delta = 20_000, 10, 0.5, 1e-6
    q = float(stats.chi2.isf(delta, d))
    sigma = (math.sqrt(q) + math.sqrt(q + 2 * eps)) / eps
    expected = math.sqrt(4 * A * n + 2 * d * sigma**2) / (n * R)
    got = auto_regularization(
        "gaussian_objective_perturbation", n=n, d=d, epsilon=eps, delta=delta
    ).regularization
    assert got == pytest.approx(expected, rel=1e-10)


def test_generalized_objective_subtracts_its_own_extra_regularisation() -> None:
    n, d, eps = 20_000, 10, 0.5
    # δ = 0: Gamma noise, m₂ = 4d(d+1)/ε²; Δ = Δ_K/n with Δ_K = 2c/ε = 1 (c = 1/4)
    total = math.sqrt(4 * A * n + 2 * 4 * d * (d + 1) / eps**2) / (n * R)
    got = auto_regularization("generalized_objective_perturbation", n=n, d=d, epsilon=eps)
    assert got.regularization == pytest.approx(total - 1.0 / n, rel=1e-12)
    # δ > 0: the Gaussian σ = (u + √(u² + 2ε))/ε with min(4Φ̄(u), P[χ²₂ > u²]) = δ
    delta = 1e-5
    u = 0.0
    lo, hi = 0.0, 40.0
    for _ in range(200):
        u = (lo + hi) / 2
        bound = min(4 * float(special.ndtr(-u)), float(stats.chi2.sf(u * u, 2)))
        lo, hi = (u, hi) if bound > delta else (lo, u)
    sigma = (u + math.sqrt(u * u + 2 * eps)) / eps
    expected = math.sqrt(4 * A * n + 2 * d * sigma**2) / (n * R) - 1.0 / n
    gauss = auto_regularization(
        "generalized_objective_perturbation", n=n, d=d, epsilon=eps, delta=delta
    )
    assert gauss.regularization == pytest.approx(expected, rel=1e-9)


def test_non_private_by_hand() -> None:
    # λ = 2√A/(R√n): n = 40_000 → 2·0.1/(10·200) = 1e-4
    got = auto_regularization("non_private", n=40_000, d=50, epsilon=None).regularization
    assert got == pytest.approx(1e-4, rel=1e-14)


@pytest.mark.parametrize("mechanism", sorted(AUTO_MECHANISMS - {"non_private"}))
def test_more_epsilon_or_more_rows_means_less_regularisation(mechanism: str) -> None:
    gaussian = ("objective" in mechanism and mechanism != "objective_perturbation") or (
        mechanism == "noisy_gd"
    )
    delta = 1e-6 if gaussian else 0.0

    def lam(n: int, eps: float, d: int = 20) -> float:
        choice = auto_regularization(mechanism, n=n, d=d, epsilon=eps, delta=delta)
        # Kifer et al.'s own Δ_K/n (Δ_K = 2c/ε) shrinks with ε too: what decreases is the
        # total regularisation λ + Δ_K/n, the request's λ alone need not
        return choice.terms.get("lambda_total", choice.unclamped)

    epsilons = [0.01, 0.05, 0.1, 0.5, 1.0, 5.0]
    by_eps = [lam(10_000, e) for e in epsilons]
    assert all(a > b for a, b in itertools.pairwise(by_eps)), by_eps
    sizes = [100, 1000, 10_000, 100_000, 1_000_000]
    by_n = [lam(n, 0.5) for n in sizes]
    assert all(a > b for a, b in itertools.pairwise(by_n)), by_n
    by_d = [lam(10_000, 0.5, d) for d in (2, 10, 50, 200)]
    assert all(a < b for a, b in itertools.pairwise(by_d)), by_d


def test_clamping_to_the_service_range() -> None:
    # ε at the service's floor, one row and d = 1000: far above the ceiling 10⁶
    huge = auto_regularization("objective_perturbation", n=1, d=1000, epsilon=1e-6)
    # by hand: √(0.04 + 2·4·1000·1001·10¹²)/10 = √(8.008e18 + 0.04)/10 ≈ 2.83e8 > 10⁶
    assert huge.unclamped == pytest.approx(math.sqrt(0.04 + 8 * 1000 * 1001 * 1e12) / 10, rel=1e-12)
    assert huge.clamped
    assert huge.regularization == ranges.MAX_REGULARIZATION
    # Kifer's extra Δ larger than the rule's total: clamped up to the floor
    tiny = auto_regularization(
        "generalized_objective_perturbation", n=1000, d=2, epsilon=1.0, params={"kifer_Delta": 50.0}
    )
    assert tiny.unclamped < 0
    assert tiny.clamped
    assert tiny.regularization == ranges.MIN_REGULARIZATION
    inside = auto_regularization("objective_perturbation", n=1000, d=2, epsilon=1.0)
    assert not inside.clamped
    assert inside.regularization == inside.unclamped


def test_the_record_names_rule_inputs_and_constants() -> None:
    record = auto_regularization(
        "objective_perturbation", n=500, d=3, epsilon=0.2, delta=0.0
    ).record()
    assert record["name"] == "excess_risk_minimiser"
    assert record["inputs"] == {
        "n": 500,
        "d": 3,
        "row_norm_bound": 1.0,
        "loss": "logistic",
        "c": 0.25,
        "epsilon": 0.2,
        "delta": 0.0,
    }
    assert record["constants"] == {"R": R, "A": A}
    assert record["regularization"] == record["unclamped"]


@pytest.mark.parametrize(
    ("mechanism", "kwargs"),
    [
        ("dp_sgd", {}),
        ("stacking_samples", {}),
        ("no_such_mechanism", {}),
        ("objective_perturbation", {"epsilon": None}),
        ("objective_perturbation", {"epsilon": math.inf}),
        ("objective_perturbation", {"epsilon": 0.0}),
        ("objective_perturbation", {"n": 0}),
        ("objective_perturbation", {"d": 0}),
        ("objective_perturbation", {"delta": 1.0}),
        ("gaussian_objective_perturbation", {"delta": 0.0}),
        ("objective_perturbation", {"params": {"h": 0.0}}),
        ("objective_perturbation", {"loss": "squared"}),
    ],
)
def test_refusals_are_value_errors(mechanism: str, kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"n": 1000, "d": 5, "epsilon": 1.0} | kwargs
    with pytest.raises(ValueError):
        auto_regularization(mechanism, **args)  # type: ignore[arg-type]


def _gdp_mu_by_hand(epsilon: float, delta: float) -> float:
    """μ with Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) = δ (Balle & Wang 2018), by scipy's root
    finder on scipy's normal CDF (not the service's gdp_mu)."""
    from scipy import optimize

    def excess(mu: float) -> float:
        return float(
            stats.norm.cdf(-epsilon / mu + mu / 2)
            - math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2)
            - delta
        )

    return float(optimize.brentq(excess, 1e-3, 50.0, xtol=1e-14, rtol=1e-14))


def test_noisy_gd_by_hand() -> None:
    # n = 10_000, d = 9, ε = 1, δ = 1e-6: μ ≈ 0.2367 (GDP), m₂ = 8·9/μ² = 72/μ²;
    # λ = √(4·0.01·10_000 + 2·72/μ²)/(10_000·10) = √(400 + 144/μ²)/100_000
    mu = _gdp_mu_by_hand(1.0, 1e-6)
    assert mu == pytest.approx(0.2367, abs=1e-4)
    choice = auto_regularization("noisy_gd", n=10_000, d=9, epsilon=1.0, delta=1e-6)
    assert choice.terms["m2"] == pytest.approx(72.0 / mu**2, rel=1e-9)
    assert choice.terms["gdp_mu"] == pytest.approx(mu, rel=1e-9)
    assert choice.regularization == pytest.approx(
        math.sqrt(400.0 + 144.0 / mu**2) / 100_000.0, rel=1e-9
    )
    assert choice.regularization == pytest.approx(5.44e-4, rel=1e-2)
    assert "8d/μ²" in choice.formula
    # independent of T (the tail average cancels σ's √T): the options do not enter
    same = auto_regularization(
        "noisy_gd", n=10_000, d=9, epsilon=1.0, delta=1e-6, params={"iterations": 500}
    )
    assert same.regularization == choice.regularization
    # Adult-sized (n = 30 162, d = 106) at ε = 0.1, δ = 1e-6: more noise, larger λ
    mu_small = _gdp_mu_by_hand(0.1, 1e-6)
    adult = auto_regularization("noisy_gd", n=30_162, d=106, epsilon=0.1, delta=1e-6)
    assert adult.regularization == pytest.approx(
        math.sqrt(4 * 0.01 * 30_162 + 2 * 8 * 106 / mu_small**2) / (30_162 * 10), rel=1e-9
    )


def test_noisy_gd_needs_delta() -> None:
    with pytest.raises(ValueError):
        auto_regularization("noisy_gd", n=1000, d=5, epsilon=1.0, delta=0.0)
