"""Calibration numbers against values worked out by hand (literal arithmetic here, never the
code under test), plus the names every mechanism must expose.

The objective-perturbation mechanisms calibrate their objective at ε₁ = ε − ε_r, ε_r the
certified release's share (:mod:`service.dp.optimize.certified`); ε₁ is derived by hand in
:mod:`tests.unit.dp._budget` and its numbers are shown in ``test_budget_split_is_hand_derived``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Context, Decimal
from fractions import Fraction
from typing import Any

import pytest
from scipy import stats

from service.dp import calibrate
from service.dp.mechanisms._common import jacobian_slack
from tests.unit.dp._budget import objective_budget

# ---------------------------------------------------------------- output perturbation


U = 2.0**-53


def _gamma(k: int) -> float:
    """γ_k = ku/(1 − ku), taken up by κ = 1 + 2⁻²⁰ as service.dp.noise.rounding does."""
    return k * U / (1 - k * U) * (1 + 2.0**-20)


@pytest.mark.parametrize(
    ("n", "d", "lam", "eps", "tau", "sensitivity", "beta"),
    [
        # S = 2/(nλ) + 2τ/λ with the certificate's τ = 1e-10 + 8(min(n, 4096) + d)u + 4cγ_d/λ
        # (logistic, c = 1/4): τ = 1e-10 + 8·1005u + γ₅/0.01 = 1e-10 + 8.926e-13 + 5.551e-14
        # = 1.0094813e-10; S = 0.2 + 2τ/0.01 = 0.20000002018962612; β = 0.5/S = 2.4999997476
        (1000, 5, 0.01, 0.5, 1.0094813e-10, 0.20000002018962612, 2.499999747629699),
        # τ = 1e-10 + 8·4201u + γ₁₀₅/0.001 = 1e-10 + 3.7312e-12 + 1.16573e-11 = 1.1538859e-10;
        # S = 1/15 + 2τ/0.001 = 0.066666897443847; β = 1/S = 14.99994807531
        (30000, 105, 0.001, 1.0, 1.1538859e-10, 0.0666668974438475, 14.999948075314057),
        # τ = 1e-10 + 8·51u + γ₁/2 = 1e-10 + 4.5297e-14 + 5.55e-17 = 1.0004535e-10;
        # S = 0.02 + τ = 0.020000000100045354; β = 0.1/S = 4.99999997498866
        (50, 1, 2.0, 0.1, 1.0004535e-10, 0.020000000100045354, 4.999999974988662),
    ],
)
def test_output_perturbation(
    n: int, d: int, lam: float, eps: float, tau: float, sensitivity: float, beta: float
) -> None:
    cal = calibrate("output_perturbation", n=n, d=d, epsilon=eps, regularization=lam)
    exact_tau = 1e-10 + 8 * (min(n, 4096) + d) * U + 4 * 0.25 * _gamma(d) / lam
    assert cal.details["certificate_tolerance"] == pytest.approx(exact_tau, rel=1e-14)
    assert cal.details["certificate_tolerance"] == pytest.approx(tau, rel=1e-7)
    assert cal.details["sensitivity_certificate_term"] == pytest.approx(2 * tau / lam, rel=1e-7)
    assert cal.details["distance_to_exact_minimiser_bound"] == pytest.approx(tau / lam, rel=1e-7)
    assert cal.details["sensitivity"] == pytest.approx(sensitivity, rel=1e-14)
    assert cal.details["beta"] == pytest.approx(beta, rel=1e-14)
    # β·S ≤ ε exactly, for S in rationals from the recorded doubles
    exact = Fraction(2) / (n * Fraction(lam)) + 2 * Fraction(exact_tau) / Fraction(lam)
    assert Fraction(cal.details["beta"]) * exact <= Fraction(eps)
    assert cal.expected_noise_norm == pytest.approx(d / beta, rel=1e-12)
    assert cal.details["expected_noise_norm"] == cal.expected_noise_norm
    assert (cal.epsilon, cal.delta) == (eps, 0.0)
    assert "2/(nλ) + 2τ/λ" in cal.composition
    assert cal.details["sensitivity_exact_minimiser"] == pytest.approx(2 / (n * lam), rel=1e-12)


def test_output_perturbation_is_not_seed_001s_2c_over_n() -> None:
    # seed 001's code: sensitivity 2C/N with C = 1/(nλ), i.e. 2/(n²λ): n times too small
    cal = calibrate("output_perturbation", n=200, d=3, epsilon=1.0, regularization=0.05)
    tau = 1e-10 + 8 * 203 * U + 0.25 * 4 * _gamma(3) / 0.05
    assert cal.details["sensitivity"] == pytest.approx(2 / (200 * 0.05) + 2 * tau / 0.05, rel=1e-14)
    assert cal.details["sensitivity"] != pytest.approx(2 / (200**2 * 0.05))


# ------------------------------------------------- the certified release's share of ε


def _split_ok(det: Mapping[str, Any], epsilon: float, objective: float) -> None:
    """ε₁ (``epsilon_objective``) is the hand-derived ``objective`` and, with the release's
    ε_r, stays within ε in exact arithmetic."""
    assert det["epsilon_objective"] == pytest.approx(objective, rel=1e-12)
    release = det["certified_release"]["epsilon"]
    assert Fraction(det["epsilon_objective"]) + Fraction(release) <= Fraction(epsilon)


@pytest.mark.parametrize(
    ("n", "d", "eps", "objective", "release"),
    [
        # τ₀ = 1e-10 + 8(min(n, 4096) + d)u, u = 2⁻⁵³, κ = √(nτ₀)/(1 + √(nτ₀)), ε_r = εκ,
        # ε₁ = ε − ε_r.
        # n = 1000, d = 4, ε = 1: 8·1004·u = 8.9173113e-13, τ₀ = 1.0089173113e-10,
        # nτ₀ = 1.0089173113e-7, √(nτ₀) = 3.1763458743e-4, κ = 3.1763458743e-4/1.00031763458743
        # = 3.1753372774e-4: ε_r = 3.175337277378e-4, ε₁ = 0.9996824662722622
        (1000, 4, 1.0, 0.9996824662722622, 3.175337277378381e-4),
        # n = 10⁷, d = 10, ε = 1 (the gradient is summed in blocks of 4096 rows, so τ₀ stops
        # growing with n; the objective's noise shrinks like 1/n, so the release's share still
        # grows like √n): 8·4106·u = 3.6468606e-12, τ₀ = 1.0364686059e-10,
        # nτ₀ = 1.0364686059e-3, √(nτ₀) = 0.032194232495, κ = 0.032194232495/1.032194232495
        # = 0.031190091439: ε_r = 0.031190091439, ε₁ = 0.968809908561
        (10_000_000, 10, 1.0, 0.9688099085607744, 0.03119009143922551),
    ],
)
def test_budget_split_is_hand_derived(
    n: int, d: int, eps: float, objective: float, release: float
) -> None:
    assert objective_budget(eps, n, d) == pytest.approx(objective, rel=1e-12)
    for mechanism, delta in (
        ("objective_perturbation", 0.0),
        ("generalized_objective_perturbation", 0.0),
        ("generalized_objective_perturbation", 1e-5),
        ("gaussian_objective_perturbation", 1e-5),
    ):
        cal = calibrate(mechanism, n=n, d=d, epsilon=eps, delta=delta, regularization=1.0)
        det = cal.details
        # the split depends on (ε, n, d) only, the same for every mechanism
        assert det["epsilon_objective"] == pytest.approx(objective, rel=1e-12)
        assert det["certified_release"]["epsilon"] == pytest.approx(release, rel=1e-12)
        assert det["epsilon_objective"] == objective_budget(eps, n, d)
        _split_ok(det, eps, objective)
        assert (cal.epsilon, cal.delta) == (eps, delta)


# ---------------------------------------------------------------- objective perturbation


def test_objective_perturbation_without_slack() -> None:
    # logistic c = 1/4, n = 1000, d = 4, λ = 0.01: c/(nλ) = 0.025; the objective runs at
    # ε₁ = 0.9996824662722622 (test_budget_split_is_hand_derived); tight Jacobian (determinant
    # lemma) ε_J = ln 1.025 = 0.0246926125904 ≤ ε₁/2, so Δ = 0 and
    # ε′ = ε₁ − 0.0246926125904 = 0.9749898536818907, β = ε′/2 = 0.4874949268409453
    # (CMS11's 2 ln 1.025 would leave 0.9502972410915)
    eps1 = objective_budget(1.0, 1000, 4)
    assert eps1 == pytest.approx(0.9996824662722622, rel=1e-12)
    cal = calibrate("objective_perturbation", n=1000, d=4, epsilon=1.0, regularization=0.01)
    det = cal.details
    assert det["c"] == 0.25
    assert det["branch"] == "no_extra_regularization"
    assert det["Delta"] == 0.0
    assert det["epsilon_prime"] == pytest.approx(0.9749898536818907, rel=1e-12)
    assert det["epsilon_prime"] == pytest.approx(eps1 - math.log(1.025), rel=1e-12)
    assert det["beta"] == pytest.approx(0.4874949268409453, rel=1e-12)
    assert det["jacobian_epsilon"] == pytest.approx(0.0246926125904, rel=1e-11)
    assert cal.expected_noise_norm == pytest.approx(4 / 0.4874949268409453, rel=1e-12)
    assert det["jacobian_epsilon"] + det["noise_epsilon"] == pytest.approx(eps1, rel=1e-15)
    _split_ok(det, 1.0, eps1)


@pytest.mark.parametrize(
    ("eps", "lam", "n", "c", "slack"),
    [
        (0.1, 0.01, 1000, 1.0, True),  # ln(1 + 0.1) > ε/2
        (0.1, 0.01, 30162, 0.5, False),  # ln(1 + 0.00166) ≤ ε/2
        (0.1, 0.001, 1000, 0.25, True),  # ln(1 + 0.25) > ε/2
    ],
)
def test_the_jacobian_split_never_exceeds_the_budget_in_real_arithmetic(
    eps: float, lam: float, n: int, c: float, slack: bool
) -> None:
    # ε_n + ε_J ≤ ε with ε_J = ln(1 + c/(n(λ + Δ))) in 80-digit decimals for the double λ + Δ
    # used: with ε_J from log1p in doubles, ε_n = ε − ε_J landed an ulp above the budget for
    # each of these
    extra, eps_noise, eps_j = jacobian_slack(eps, lam, n, c)
    ctx = Context(prec=80)
    real = ctx.ln(1 + ctx.divide(Decimal(c), n * Decimal(lam + extra)))
    assert Decimal(eps_noise) + real <= Decimal(eps)
    assert Decimal(eps_j) >= real
    assert eps_j == pytest.approx(float(real), rel=1e-15)
    assert eps_noise == pytest.approx(eps - float(real), rel=1e-14)
    assert (extra > 0.0) == slack


def test_objective_perturbation_slack_branch_uses_e_to_the_eps_over_2() -> None:
    # n = 100, d = 2, λ = 0.001, ε = 0.1, c = 1/4: τ₀ = 1e-10 + 8·102u = 1.0009059420e-10,
    # √(nτ₀) = 1.0004528684e-4, κ = 1.0003527879e-4, ε₁ = 0.1 − 1.0003527879e-5
    # = 0.0999899964721213. ln(1 + 2.5) = 1.2528 > ε₁/2 = 0.0499949982, so slack:
    # Δ = c/(n(e^{ε₁/2} − 1)) − λ = 0.25/(100·0.0512658381793) − 0.001 = 0.0477654174551
    # (e^{0.0499949982360} − 1 = 0.051265838179314), then ε_J = ln(1 + c/(n(λ + Δ))) = ε₁/2
    # and ε′ = ε₁/2 = 0.0499949982361, β = ε₁/4 = 0.0249974991180
    eps1 = objective_budget(0.1, 100, 2)
    assert eps1 == pytest.approx(0.0999899964721213, rel=1e-12)
    cal = calibrate("objective_perturbation", n=100, d=2, epsilon=0.1, regularization=0.001)
    det = cal.details
    assert det["branch"] == "extra_regularization"
    assert det["Delta"] == pytest.approx(0.0477654174551, rel=1e-11)
    assert det["Delta"] == pytest.approx(0.25 / (100 * math.expm1(eps1 / 2)) - 0.001, rel=1e-12)
    assert det["epsilon_prime"] == pytest.approx(0.0499949982361, rel=1e-11)
    assert det["epsilon_prime"] == pytest.approx(eps1 / 2, rel=1e-12)
    assert det["beta"] == pytest.approx(eps1 / 4, rel=1e-12)
    assert det["effective_regularization"] == pytest.approx(0.0487654174551, rel=1e-11)
    assert det["jacobian_epsilon"] == pytest.approx(eps1 / 2, rel=1e-12)
    _split_ok(det, 0.1, eps1)
    # CMS11's rule (e^{ε/4}, squared Jacobian) would have Δ = 0.25/(100·0.0253151205) − 0.001
    assert det["Delta"] != pytest.approx(0.0977552, abs=1e-4)


@pytest.mark.parametrize(
    ("n", "eps", "beta", "delta"),
    [
        # seed 000 note §3.3's cases, Huber h = 0.5 (c = 1), λ = 0.01, d = 10, re-derived with
        # the tight Jacobian ε_J = ln(1 + 1/(100n)·100), the better branch and the objective's
        # budget ε₁ (τ₀ = 1e-10 + 8(n + 10)u, κ = √(nτ₀)/(1 + √(nτ₀)), ε₁ = ε(1 − κ)):
        # n = 789: κ = 2.8180691803e-4; ln(1 + 1/7.89) = 0.1193309147
        # ε = 0.1: ε₁ = 0.0999718193082, ε₁/2 < 0.1193: Δ = 1/(789·(e^{ε₁/2} − 1)) − 0.01
        #   = 1/(789·0.0512562837070) − 0.01, β = ε₁/4
        (789, 0.1, 0.02499295482705, 0.01472725354389),
        # ε = 0.25: ε₁ = 0.2499295482705 ≥ 2·0.1193: β = (ε₁ − 0.1193309147)/2 (was 0.0057)
        (789, 0.25, 0.06529931680123, 0.0),
        # ε = 0.24 (the cliff: CMS11 gave β = 0.00067, 90× less): ε₁ = 0.2399323663397
        (789, 0.24, 0.06030072583582, 0.0),
        # n = 170: κ = 1.3047120539e-4, ε₁ = 0.4999347643973; ln(1 + 1/1.7) = 0.4626235219
        # > ε₁/2: Δ = 1/(170·(e^{ε₁/2} − 1)) − 0.01, e^{ε₁/2} − 1 = 0.2839835352848, β = ε₁/4
        (170, 0.5, 0.12498369109933, 0.01071371122018),
        # n = 8678: τ₀ = 1e-10 + 8(4096 + 10)u = 1.0364686e-10 (blocks of 4096 rows),
        # √(nτ₀) = 9.4837e-4, κ = 9.4749344196e-4, ε₁ = 0.9990525065580;
        # ln(1 + 1/86.78) = 0.0114575039: β = (ε₁ − 0.0114575039)/2
        (8678, 1.0, 0.49379750133408, 0.0),
    ],
)
def test_objective_perturbation_tight_constants(
    n: int, eps: float, beta: float, delta: float
) -> None:
    cal = calibrate(
        "objective_perturbation", n=n, d=10, epsilon=eps, regularization=0.01, loss="huber", h=0.5
    )
    assert cal.details["c"] == 1.0
    assert cal.details["huber_h"] == 0.5
    assert cal.details["beta"] == pytest.approx(beta, rel=1e-9)
    assert cal.details["Delta"] == pytest.approx(delta, rel=1e-9, abs=1e-15)
    _split_ok(cal.details, eps, objective_budget(eps, n, 10))


def test_objective_perturbation_noise_is_continuous_at_the_branch_threshold() -> None:
    # Huber c = 1, λ = 0.01, n = 789, d = 3: the branch changes where ε₁ = 2 ln(1 + 1/7.89)
    # = 0.2386618293; τ₀ = 1e-10 + 8·792u = 1.0070343731e-10, √(nτ₀) = 2.8187765438e-4,
    # κ = 2.8179822175e-4, so at ε = 0.2386618293/(1 − κ) = 0.2387291028. Either side of it
    # β is ≈ ε₁/4 = 0.0596654573 (no cliff)
    threshold = 0.2387291028
    assert objective_budget(threshold, 789, 3) == pytest.approx(0.2386618293, rel=1e-9)
    branches = set()
    for eps in (threshold * (1 - 1e-6), threshold * (1 + 1e-6)):
        cal = calibrate(
            "objective_perturbation",
            n=789,
            d=3,
            epsilon=eps,
            regularization=0.01,
            loss="huber",
            h=0.5,
        )
        branches.add(cal.details["branch"])
        assert cal.details["beta"] == pytest.approx(0.0596654573, rel=1e-5)
    assert branches == {"no_extra_regularization", "extra_regularization"}


def test_huber_width_sets_c() -> None:
    cal = calibrate(
        "objective_perturbation", n=1000, d=3, epsilon=1.0, regularization=0.01, loss="huber", h=0.1
    )
    # c = 1/(2h) = 5; n = 1000, d = 3: κ = 3.1753233051e-4, ε₁ = 0.9996824676695;
    # ε_J = ln(1 + 5/10) = 0.4054651081 ≤ ε₁/2: ε′ = ε₁ − ε_J = 0.5942173596
    assert cal.details["c"] == pytest.approx(5.0)
    assert cal.details["epsilon_prime"] == pytest.approx(0.5942173596, rel=1e-9)
    assert cal.details["epsilon_prime"] == pytest.approx(
        objective_budget(1.0, 1000, 3) - math.log(1.5), rel=1e-12
    )


# ------------------------------------------------------ generalized objective perturbation


def test_generalized_pure_epsilon() -> None:
    # n = 1000, d = 6, λ = 0.01, ε = 1, c = 1/4: κ = 3.1753652218e-4, ε₁ = 0.9996824634778;
    # Δ_K = 2c/ε₁ = 0.5001588186918, ε_J = ln(1 + 0.25/(10 + 0.5001588187)) = 0.0235301457,
    # ε_n = ε₁ − ε_J = 0.9761523178, β = ε_n/2 = 0.4880761589, extra ridge in J = Δ_K/1000
    eps1 = objective_budget(1.0, 1000, 6)
    assert eps1 == pytest.approx(0.9996824634778, rel=1e-12)
    cal = calibrate(
        "generalized_objective_perturbation", n=1000, d=6, epsilon=1.0, regularization=0.01
    )
    det = cal.details
    assert det["variant"] == "pure"
    assert det["kifer_Delta"] == pytest.approx(0.5001588186918, rel=1e-12)
    assert det["kifer_Delta"] == pytest.approx(0.5 / eps1, rel=1e-15)
    assert det["Delta"] == pytest.approx(0.0005001588186918, rel=1e-12)
    assert det["jacobian_epsilon"] == pytest.approx(0.0235301457, rel=1e-8)
    assert det["beta"] == pytest.approx(0.4880761589, rel=1e-8)
    assert cal.expected_noise_norm == pytest.approx(6 / 0.4880761589, rel=1e-8)
    assert det["jacobian_epsilon"] + det["noise_epsilon"] == pytest.approx(eps1, rel=1e-15)
    _split_ok(det, 1.0, eps1)
    assert (cal.epsilon, cal.delta) == (1.0, 0.0)


def test_generalized_explicit_kifer_delta() -> None:
    # kifer_Delta = 0: ε_J = ln(1 + c/(nλ)) = ln 1.025 = 0.0246926126, β = (ε₁ − ε_J)/2 with
    # ε₁ = 0.9996824634778 (n = 1000, d = 6): β = 0.4874949254
    cal = calibrate(
        "generalized_objective_perturbation",
        n=1000,
        d=6,
        epsilon=1.0,
        regularization=0.01,
        kifer_Delta=0.0,
    )
    assert cal.details["Delta"] == 0.0
    assert cal.details["beta"] == pytest.approx(0.4874949254, rel=1e-9)
    assert cal.details["beta"] == pytest.approx(
        (objective_budget(1.0, 1000, 6) - 0.0246926126) / 2, rel=1e-9
    )


@pytest.mark.parametrize("d", [2, 10])
def test_generalized_gaussian(d: int) -> None:
    # δ = 1e-6: u solves min(4Φ̄(u), P[χ²_2 > u²] = e^{−u²/2}) = δ; at this δ the first is
    # smaller, so u = Φ̄⁻¹(δ/4) = Φ̄⁻¹(2.5e-7) = 5.0263128; σ = (u + √(u² + 2ε_n))/ε_n with
    # ε_n = ε₁ − ln(1 + c/(nλ + 2c/ε₁)): ε₁ = 0.9996824691 (d = 2) or 0.9996824579 (d = 10),
    # Δ_K = 2c/ε₁ = 0.5001588, ε_n = 0.9761523234 (d = 2) or 0.9761523122 (d = 10)
    eps1 = objective_budget(1.0, 1000, d)
    eps_n = eps1 - math.log1p(0.25 / (1000 * 0.01 + 0.5 / eps1))
    assert eps_n == pytest.approx({2: 0.9761523234, 10: 0.9761523122}[d], rel=1e-9)
    u = float(stats.norm.isf(2.5e-7))
    assert u == pytest.approx(5.0263128, abs=1e-6)
    assert math.exp(-u * u / 2) > 1e-6
    sigma = (u + math.sqrt(u * u + 2 * eps_n)) / eps_n
    cal = calibrate(
        "generalized_objective_perturbation",
        n=1000,
        d=d,
        epsilon=1.0,
        delta=1e-6,
        regularization=0.01,
    )
    det = cal.details
    assert det["variant"] == "gaussian"
    assert det["gaussian_tail_quantile"] == pytest.approx(u, rel=1e-10)
    assert det["sigma"] == pytest.approx(sigma, rel=1e-10)
    assert det["jacobian_epsilon"] + det["noise_epsilon"] == pytest.approx(eps1, rel=1e-15)
    _split_ok(det, 1.0, eps1)
    assert (cal.epsilon, cal.delta) == (1.0, 1e-6)
    # the tail condition holds with equality at the calibrated σ
    t = (eps_n * sigma**2 - 2) / (2 * sigma)
    assert 4 * stats.norm.sf(t) == pytest.approx(1e-6, rel=1e-8)


def test_generalized_gaussian_one_dimension_uses_the_two_sided_tail() -> None:
    # d = 1: the span of x, x′ is one line, P[χ²_1 > u²] = 2Φ̄(u) = δ ⇒ u = Φ̄⁻¹(δ/2)
    cal = calibrate(
        "generalized_objective_perturbation",
        n=1000,
        d=1,
        epsilon=1.0,
        delta=1e-3,
        regularization=0.01,
    )
    assert cal.details["gaussian_tail_quantile"] == pytest.approx(3.2905267, abs=1e-6)


# ------------------------------------------------------ Gaussian objective perturbation


@pytest.mark.parametrize(
    ("d", "eps", "sigma_note"),
    # seed 002 note §5 (δ = 0.05, ε̃ = ε): d=10: 85.81, 43.02, 8.785; d=30, ε=1: 13.38
    [(10, 0.1, 85.81), (10, 0.2, 43.02), (10, 1.0, 8.785), (30, 1.0, 13.38)],
)
def test_gop_sigma_matches_seed_002_examples(d: int, eps: float, sigma_note: float) -> None:
    q = float(stats.chi2.isf(0.05, d))

    def sigma_star(eps_t: float) -> float:
        return (math.sqrt(q) + math.sqrt(q + 2 * eps_t)) / eps_t

    # the note's σ* at ε̃ = ε (its examples have no Jacobian term and no release share)
    assert sigma_star(eps) == pytest.approx(sigma_note, abs=0.006)
    # n λ = 1e7 makes the Jacobian ε_J = ln(1 + 2.5e-8) = 2.5e-8 negligible, but at n = 10⁷
    # the certified release takes κ = 0.0311901 of ε (d = 10: τ₀ = 1.0364686e-10,
    # √(nτ₀) = 0.0321942; d = 30: τ₀ = 1.0366462e-10, κ = 0.0311927), so ε̃ = ε₁ − 2.5e-8
    # with ε₁ = 0.96881ε: e.g. d = 10, ε = 0.1: σ* = 88.5 instead of 85.81
    eps1 = objective_budget(eps, 10_000_000, d)
    assert eps1 == pytest.approx(
        eps * {10: 0.9688099085607744, 30: 0.9688073192777912}[d], rel=1e-12
    )
    cal = calibrate(
        "gaussian_objective_perturbation",
        n=10_000_000,
        d=d,
        epsilon=eps,
        delta=0.05,
        regularization=1.0,
    )
    assert cal.details["epsilon_tilde"] == pytest.approx(eps1 - math.log1p(2.5e-8), rel=1e-12)
    assert cal.details["sigma"] == pytest.approx(sigma_star(eps1 - math.log1p(2.5e-8)), rel=1e-12)
    _split_ok(cal.details, eps, eps1)


def test_gop_sigma_solves_the_chi_square_condition() -> None:
    # n = 1000, d = 8, λ = 0.01, ε = 1: κ = 3.1753931659e-4, ε₁ = 0.9996824606834;
    # ε̃ = ε₁ − ln 1.025 = 0.9749898480930 (tight Jacobian); q = χ²_8 at 1 − 1e-5;
    # σ* = (√q + √(q + 2ε̃))/ε̃ and P[χ²_8 ≤ (σ*²ε̃ − 2)²/(4σ*²)] = 1 − δ
    eps1 = objective_budget(1.0, 1000, 8)
    eps_t = eps1 - math.log(1.025)
    assert eps_t == pytest.approx(0.9749898480930, rel=1e-12)
    q = float(stats.chi2.isf(1e-5, 8))
    sigma = (math.sqrt(q) + math.sqrt(q + 2 * eps_t)) / eps_t
    cal = calibrate(
        "gaussian_objective_perturbation",
        n=1000,
        d=8,
        epsilon=1.0,
        delta=1e-5,
        regularization=0.01,
    )
    det = cal.details
    assert det["epsilon_tilde"] == pytest.approx(0.9749898481, rel=1e-9)
    assert det["chi2_quantile"] == pytest.approx(q, rel=1e-12)
    assert det["sigma"] == pytest.approx(sigma, rel=1e-12)
    assert det["Delta"] == 0.0
    assert det["epsilon_tilde"] + det["jacobian_epsilon"] == pytest.approx(eps1, rel=1e-15)
    _split_ok(det, 1.0, eps1)
    assert stats.chi2.cdf((sigma**2 * eps_t - 2) ** 2 / (4 * sigma**2), 8) == pytest.approx(
        1 - 1e-5, abs=1e-12
    )
    # E‖η‖ = σ√2 Γ(9/2)/Γ(4) = σ·√2·11.6317/6
    assert cal.expected_noise_norm == pytest.approx(
        sigma * math.sqrt(2) * math.gamma(4.5) / math.gamma(4), rel=1e-12
    )
    assert (cal.epsilon, cal.delta) == (1.0, 1e-5)


def test_gop_slack_branch() -> None:
    cal = calibrate(
        "gaussian_objective_perturbation",
        n=100,
        d=2,
        epsilon=0.1,
        delta=1e-5,
        regularization=0.001,
    )
    # same slack as objective perturbation's test (same n, d, so the same ε₁ =
    # 0.0999899964721213): Δ = 0.25/(100·0.0512658381793) − 0.001, ε̃ = ε₁/2
    eps1 = objective_budget(0.1, 100, 2)
    assert cal.details["Delta"] == pytest.approx(0.0477654174551, rel=1e-11)
    assert cal.details["epsilon_tilde"] == pytest.approx(0.0499949982361, rel=1e-11)
    assert cal.details["epsilon_tilde"] == pytest.approx(eps1 / 2, rel=1e-12)
    assert cal.details["branch"] == "extra_regularization"
    _split_ok(cal.details, 0.1, eps1)


# ---------------------------------------------------------------- every mechanism


REQUIRED = {
    "non_private": {"guarantee", "c", "regularization"},
    "output_perturbation": {"sensitivity", "beta", "expected_noise_norm", "c"},
    "objective_perturbation": {
        "epsilon_prime",
        "Delta",
        "beta",
        "branch",
        "c",
        "expected_noise_norm",
        "jacobian_epsilon",
        "effective_regularization",
    },
    "generalized_objective_perturbation": {
        "kifer_Delta",
        "Delta",
        "beta",
        "jacobian_epsilon",
        "noise_epsilon",
        "c",
        "expected_noise_norm",
        "variant",
    },
    "gaussian_objective_perturbation": {
        "epsilon_tilde",
        "Delta",
        "sigma",
        "chi2_quantile",
        "branch",
        "c",
        "expected_noise_norm",
    },
}


@pytest.mark.parametrize("mechanism", sorted(REQUIRED))
def test_details_expose_every_number_by_name(mechanism: str) -> None:
    delta = 1e-6 if mechanism == "gaussian_objective_perturbation" else 0.0
    cal = calibrate(mechanism, n=500, d=3, epsilon=0.8, delta=delta, regularization=0.01)
    missing = REQUIRED[mechanism] - set(cal.details)
    assert not missing
    for key in ("n", "d", "epsilon", "delta", "loss", "regularization"):
        assert key in cal.details
    assert isinstance(cal.composition, str)
    assert len(cal.composition) > 20


def test_non_private_reports_no_guarantee() -> None:
    cal = calibrate("non_private", n=10, d=2, epsilon=1.0, regularization=0.1)
    assert cal.epsilon == math.inf
    assert cal.details["guarantee"] == "none"
    assert "no differential privacy" in cal.composition
