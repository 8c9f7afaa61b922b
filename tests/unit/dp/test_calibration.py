"""Calibration numbers against values worked out by hand (literal arithmetic here, never the
code under test), plus the names every mechanism must expose."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from service.dp import calibrate

# ---------------------------------------------------------------- output perturbation


@pytest.mark.parametrize(
    ("n", "d", "lam", "eps", "sensitivity", "beta"),
    [
        # S = 2/(nλ) + 2τ/λ with the solver tolerance τ = 1e-10:
        # 2/(1000·0.01) + 2e-10/0.01 = 0.2 + 2e-8 = 0.20000002; β = ε/S = 0.5/0.20000002
        (1000, 5, 0.01, 0.5, 0.20000002, 2.499999750000025),
        # 2/(30000·0.001) + 2e-10/0.001 = 1/15 + 2e-7 = 0.0666668666…; β = 1/S
        (30000, 105, 0.001, 1.0, 0.06666686666666667, 14.999955000134998),
        # 2/(50·2) + 2e-10/2 = 0.0200000001; β = 0.1/0.0200000001 = 4.999999975
        (50, 1, 2.0, 0.1, 0.0200000001, 4.999999975),
    ],
)
def test_output_perturbation(
    n: int, d: int, lam: float, eps: float, sensitivity: float, beta: float
) -> None:
    cal = calibrate("output_perturbation", n=n, d=d, epsilon=eps, regularization=lam)
    assert cal.details["sensitivity"] == pytest.approx(sensitivity, rel=1e-12)
    assert cal.details["beta"] == pytest.approx(beta, rel=1e-12)
    assert cal.expected_noise_norm == pytest.approx(d / beta, rel=1e-12)
    assert cal.details["expected_noise_norm"] == cal.expected_noise_norm
    assert (cal.epsilon, cal.delta) == (eps, 0.0)
    assert "2/(nλ) + 2τ/λ" in cal.composition
    assert cal.details["sensitivity_exact_minimiser"] == pytest.approx(2 / (n * lam), rel=1e-12)


def test_output_perturbation_is_not_seed_001s_2c_over_n() -> None:
    # seed 001's code: sensitivity 2C/N with C = 1/(nλ), i.e. 2/(n²λ): n times too small
    cal = calibrate("output_perturbation", n=200, d=3, epsilon=1.0, regularization=0.05)
    assert cal.details["sensitivity"] == pytest.approx(2 / (200 * 0.05) + 2e-10 / 0.05)
    assert cal.details["sensitivity"] != pytest.approx(2 / (200**2 * 0.05))


# ---------------------------------------------------------------- objective perturbation


def test_objective_perturbation_without_slack() -> None:
    # logistic c = 1/4, n = 1000, λ = 0.01: c/(nλ) = 0.025; tight Jacobian (determinant lemma)
    # ε_J = ln 1.025 = 0.0246926125904 ≤ ε/2, so Δ = 0 and
    # ε′ = 1 − 0.0246926125904 = 0.9753073874096 (CMS11's 2 ln 1.025 would leave 0.9506147748)
    cal = calibrate("objective_perturbation", n=1000, d=4, epsilon=1.0, regularization=0.01)
    det = cal.details
    assert det["c"] == 0.25
    assert det["branch"] == "no_extra_regularization"
    assert det["Delta"] == 0.0
    assert det["epsilon_prime"] == pytest.approx(0.9753073874096, rel=1e-12)
    assert det["beta"] == pytest.approx(0.4876536937048, rel=1e-12)
    assert det["jacobian_epsilon"] == pytest.approx(0.0246926125904, rel=1e-11)
    assert cal.expected_noise_norm == pytest.approx(4 / 0.4876536937048, rel=1e-12)
    assert det["jacobian_epsilon"] + det["noise_epsilon"] == pytest.approx(1.0, rel=1e-15)


def test_objective_perturbation_slack_branch_uses_e_to_the_eps_over_2() -> None:
    # n = 100, λ = 0.001, ε = 0.1, c = 1/4: ln(1 + 2.5) = 1.2528 > ε/2 = 0.05, so slack:
    # Δ = c/(n(e^{ε/2} − 1)) − λ = 0.25/(100·0.0512710963760) − 0.001 = 0.0477604162327
    # (e^{0.05} − 1 = 0.051271096376024), then ε_J = ln(1 + c/(n(λ + Δ))) = ε/2 and
    # ε′ = ε/2 = 0.05, β = 0.025
    cal = calibrate("objective_perturbation", n=100, d=2, epsilon=0.1, regularization=0.001)
    det = cal.details
    assert det["branch"] == "extra_regularization"
    assert det["Delta"] == pytest.approx(0.0477604162327, rel=1e-11)
    assert det["epsilon_prime"] == pytest.approx(0.05, rel=1e-12)
    assert det["beta"] == pytest.approx(0.025, rel=1e-12)
    assert det["effective_regularization"] == pytest.approx(0.0487604162327, rel=1e-11)
    assert det["jacobian_epsilon"] == pytest.approx(0.05, rel=1e-12)
    # CMS11's rule (e^{ε/4}, squared Jacobian) would have Δ = 0.25/(100·0.0253151205) − 0.001
    assert det["Delta"] != pytest.approx(0.0977552, abs=1e-4)


@pytest.mark.parametrize(
    ("n", "eps", "beta", "delta"),
    [
        # seed 000 note §3.3's cases, Huber h = 0.5 (c = 1), λ = 0.01, re-derived with the
        # tight Jacobian ε_J = ln(1 + 1/(100n)·100) and the better branch:
        # n = 789: ln(1 + 1/7.89) = 0.1193309147
        (789, 0.1, 0.025, 0.01472010962366),  # > 0.05: Δ = 1/(789·0.0512710964) − 0.01
        (789, 0.25, 0.0653345427, 0.0),  # ≤ 0.125: β = (0.25 − 0.1193309147)/2 (was 0.0057)
        (789, 0.24, 0.0603345427, 0.0),  # the cliff: CMS11 gave β = 0.00067, 90× less
        # n = 170: ln(1 + 1/1.7) = 0.4626235219 > 0.25: Δ = 1/(170·(e^{0.25} − 1)) − 0.01,
        # e^{0.25} − 1 = 0.2840254167
        (170, 0.5, 0.125, 0.01071065684816),
        # n = 8678: ln(1 + 1/86.78) = 0.0114575039: β = (1 − 0.0114575039)/2
        (8678, 1.0, 0.4942712481, 0.0),
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


def test_objective_perturbation_noise_is_continuous_at_the_branch_threshold() -> None:
    # Huber c = 1, λ = 0.01, n = 789: the threshold is ε = 2 ln(1 + 1/7.89) = 0.2386618293;
    # either side of it β is ≈ ε/4 = 0.0596654573 (no cliff)
    for eps in (0.2386618293 * (1 - 1e-6), 0.2386618293 * (1 + 1e-6)):
        cal = calibrate(
            "objective_perturbation",
            n=789,
            d=3,
            epsilon=eps,
            regularization=0.01,
            loss="huber",
            h=0.5,
        )
        assert cal.details["beta"] == pytest.approx(0.0596654573, rel=1e-5)


def test_huber_width_sets_c() -> None:
    cal = calibrate(
        "objective_perturbation", n=1000, d=3, epsilon=1.0, regularization=0.01, loss="huber", h=0.1
    )
    # c = 1/(2h) = 5; ε_J = ln(1 + 5/10) = 0.4054651081 ≤ 0.5: ε′ = 1 − ε_J = 0.5945348919
    assert cal.details["c"] == pytest.approx(5.0)
    assert cal.details["epsilon_prime"] == pytest.approx(0.5945348919, rel=1e-9)


# ------------------------------------------------------ generalized objective perturbation


def test_generalized_pure_epsilon() -> None:
    # n = 1000, λ = 0.01, ε = 1, c = 1/4: Δ_K = 2c/ε = 0.5,
    # ε_J = ln(1 + 0.25/(10 + 0.5)) = ln(1.0238095238) = 0.0235304974,
    # ε_n = 0.9764695026, β = ε_n/2 = 0.4882347513, extra ridge in J = 0.5/1000
    cal = calibrate(
        "generalized_objective_perturbation", n=1000, d=6, epsilon=1.0, regularization=0.01
    )
    det = cal.details
    assert det["variant"] == "pure"
    assert det["kifer_Delta"] == pytest.approx(0.5)
    assert det["Delta"] == pytest.approx(0.0005)
    assert det["jacobian_epsilon"] == pytest.approx(0.0235304974, rel=1e-8)
    assert det["beta"] == pytest.approx(0.4882347513, rel=1e-8)
    assert cal.expected_noise_norm == pytest.approx(6 / 0.4882347513, rel=1e-8)
    assert (cal.epsilon, cal.delta) == (1.0, 0.0)


def test_generalized_explicit_kifer_delta() -> None:
    # kifer_Delta = 0: ε_J = ln(1 + c/(nλ)) = ln 1.025 = 0.0246926126, β = (1 − ε_J)/2
    cal = calibrate(
        "generalized_objective_perturbation",
        n=1000,
        d=6,
        epsilon=1.0,
        regularization=0.01,
        kifer_Delta=0.0,
    )
    assert cal.details["Delta"] == 0.0
    assert cal.details["beta"] == pytest.approx((1 - 0.0246926126) / 2, rel=1e-9)


@pytest.mark.parametrize("d", [2, 10])
def test_generalized_gaussian(d: int) -> None:
    # δ = 1e-6: u solves min(4Φ̄(u), P[χ²_2 > u²] = e^{−u²/2}) = δ; at this δ the first is
    # smaller, so u = Φ̄⁻¹(δ/4) = Φ̄⁻¹(2.5e-7) = 5.0263128; σ = (u + √(u² + 2ε_n))/ε_n.
    eps_n = 1.0 - math.log1p(0.25 / (1000 * 0.01 + 0.5))
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
    # n λ = 1e7 makes ε̃ = ε − 2 ln(1 + 2.5e-8) = ε − 5e-8 ≈ ε
    cal = calibrate(
        "gaussian_objective_perturbation",
        n=10_000_000,
        d=d,
        epsilon=eps,
        delta=0.05,
        regularization=1.0,
    )
    assert cal.details["sigma"] == pytest.approx(sigma_note, abs=0.006)


def test_gop_sigma_solves_the_chi_square_condition() -> None:
    # n = 1000, λ = 0.01, ε = 1: ε̃ = 1 − ln 1.025 = 0.9753073874 (tight Jacobian); q = χ²_8 at
    # 1 − 1e-5; σ* = (√q + √(q + 2ε̃))/ε̃ and P[χ²_8 ≤ (σ*²ε̃ − 2)²/(4σ*²)] = 1 − δ
    eps_t = 0.9753073874096286
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
    assert det["epsilon_tilde"] == pytest.approx(0.9753073874, rel=1e-9)
    assert det["chi2_quantile"] == pytest.approx(q, rel=1e-12)
    assert det["sigma"] == pytest.approx(sigma, rel=1e-12)
    assert det["Delta"] == 0.0
    assert stats.chi2.cdf((sigma**2 * eps_t - 2) ** 2 / (4 * sigma**2), 8) == pytest.approx(
        1 - 1e-5, abs=1e-12
    )
    # E‖η‖ = σ√2 Γ(9/2)/Γ(4) = σ·√2·11.6317/6
    assert cal.expected_noise_norm == pytest.approx(
        sigma * math.sqrt(2) * math.gamma(4.5) / math.gamma(4), rel=1e-12
    )
    assert (cal.epsilon, cal.delta) == (1.0, 1e-5)


def test_gop_slack_branch() -> None:
    # same slack as objective perturbation's test: Δ = 0.25/(100·0.025315120524) − 0.001
    cal = calibrate(
        "gaussian_objective_perturbation",
        n=100,
        d=2,
        epsilon=0.1,
        delta=1e-5,
        regularization=0.001,
    )
    # same slack as objective perturbation's test: Δ = 0.25/(100·0.0512710963760) − 0.001
    assert cal.details["Delta"] == pytest.approx(0.0477604162327, rel=1e-11)
    assert cal.details["epsilon_tilde"] == pytest.approx(0.05, rel=1e-12)
    assert cal.details["branch"] == "extra_regularization"


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
