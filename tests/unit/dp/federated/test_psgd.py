"""psgd: every site answer is a fresh Gaussian release composed in zCDP. σ against hand
arithmetic (Bun–Steinke inversion, each site's floating-point margin), the CKS round trip, the
schedule's public numbers, the law of a site's released answers (with a half-noise control the
test rejects), fresh noise in every answer, and the released model's convergence."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats

from service.dp.core.accounting import gaussian_zcdp, zcdp_to_dp, zcdp_to_dp_cks
from service.dp.core.losses import LogisticLoss
from service.dp.core.validation import PrivacyParameterError
from service.dp.data import clipping
from service.dp.federated import federated_calibrate, federated_fit, gaussian_rounds, psgd
from service.dp.optimize.solvers import minimize_erm
from tests.unit.dp.federated._data import hand_sum_sensitivity, make_sites, pooled

GAMMA = 2.0**-32


def _cal(eps: float, delta: float, **params: Any) -> Any:
    return federated_calibrate(
        "psgd", site_sizes=(300, 500), d=6, epsilon=eps, delta=delta, regularization=0.01, **params
    )


def test_bun_steinke_sigma_by_hand() -> None:
    # ε = 1, δ = 1e-5, L = ln 1e5: ρ = (√(L + 1) − √L)² = 0.0208199383395355 in total over
    # T = 100 answers, ρ₁ = ρ/100 each; sensitivity 2L = 2 (|l′| ≤ 1, ‖x‖ ≤ 1, replace-one),
    # σ = 2/√(2ρ₁) = √2/√(ρ/100) = 98.01110337256824
    cal = _cal(1.0, 1e-5, iterations=100, zcdp_conversion="bun_steinke")
    det = cal.details
    assert det["rho_total"] == pytest.approx(0.0208199383395355, rel=1e-9)
    assert det["rho_per_round"] == pytest.approx(0.0208199383395355 / 100, rel=1e-9)
    assert det["sigma"] == pytest.approx(98.01110337256824, rel=1e-9)
    assert det["sensitivity"] == 2.0
    assert "exact grid release" in det["release"]
    for cost in cal.site_costs:
        assert cost.epsilon <= 1.0
        assert cost.epsilon == pytest.approx(1.0, rel=1e-9)
        assert cost.delta == 1e-5


def test_each_site_scales_sigma_by_its_floating_point_margin() -> None:
    cal = _cal(1.0, 1e-5, iterations=50)
    det = cal.details
    sigma = Fraction(det["sigma"])
    for site, n in zip(det["sites"], (300, 500), strict=True):
        delta = hand_sum_sensitivity(n, 6, 1.0)
        own = Fraction(site["sigma"])
        assert own >= sigma * delta / 2  # Δ_k/σ_k ≤ 2/σ: each answer costs at most ρ₁
        assert Fraction(math.nextafter(site["sigma"], 0.0)) < sigma * delta / 2
        assert float(delta**2 / (2 * own**2)) <= det["rho_per_round"] * (1 + 1e-15)
    assert str(det["sites"][1]["sigma"]) not in cal.composition


def test_very_noisy_answers_use_a_scaled_grid_and_pay_its_subnormal_term() -> None:
    # ε = 1e-3 over T = 50: σ = 2/√(2ρ/50) ≈ 2.885·10⁴ (CKS), so the grid is sγ with s the
    # smallest power of two with σ_k/s ≤ 16: s = 2¹¹ = 2048 (σ_k/2¹⁰ ≈ 28 > 16, σ_k/2¹¹ ≈ 14). The
    # centre S/s may be subnormal, moving each coordinate by ≤ s·2⁻¹⁰⁷⁵, so Δ_k gains
    # 2s⌈√d⌉2⁻¹⁰⁷⁵ (d = 6: ⌈√6⌉ = 3) on top of 2C + 2E(n)
    cal = _cal(1e-3, 1e-5, iterations=50)
    sigma = Fraction(cal.details["sigma"])
    for site, n in zip(cal.details["sites"], (300, 500), strict=True):
        own = site["sigma"]
        assert own == pytest.approx(2.885e4, rel=1e-3)
        assert gaussian_rounds.grid_scale(own) == 2048
        delta = hand_sum_sensitivity(n, 6, 1.0) + 2 * 2048 * 3 * Fraction(1, 2**1075)
        assert Fraction(site["sensitivity"]) >= delta
        assert Fraction(own) >= sigma * delta / 2  # each answer still costs at most ρ₁
    assert gaussian_rounds.grid_scale(16.0) == 1
    assert gaussian_rounds.grid_scale(16.5) == 2


@pytest.mark.parametrize(("eps", "delta", "T"), [(1.0, 1e-5, 50), (0.3, 1e-6, 7)])
def test_cks_round_trip_through_accounting(eps: float, delta: float, T: int) -> None:
    det = _cal(eps, delta, iterations=T).details
    rho_round = gaussian_zcdp(2.0, det["sigma"])
    assert rho_round == pytest.approx(det["rho_per_round"], rel=1e-12)
    spent = zcdp_to_dp_cks(T * rho_round, delta)
    assert spent.epsilon <= eps
    assert spent.epsilon == pytest.approx(eps, rel=1e-6)
    bs = _cal(eps, delta, iterations=T, zcdp_conversion="bun_steinke")
    assert det["sigma"] < bs.details["sigma"]
    assert det["epsilon_bun_steinke"] == pytest.approx(zcdp_to_dp(det["rho_total"], delta).epsilon)


def test_sigma_grows_like_the_square_root_of_the_rounds() -> None:
    # ρ₁ = ρ/T, σ = 2/√(2ρ/T): four times the rounds, twice the noise per answer
    s25 = _cal(1.0, 1e-5, iterations=25).details["sigma"]
    s100 = _cal(1.0, 1e-5, iterations=100).details["sigma"]
    assert s100 == pytest.approx(2.0 * s25, rel=1e-9)


def test_huber_constant_and_schedule_details() -> None:
    # Huber h = 0.25: c = 1/(2h) = 2; L_J = c + λ = 2.1; κ = 21; m = (√21 − 1)/(√21 + 1)
    cal = federated_calibrate(
        "psgd",
        site_sizes=(1000, 1000, 1000),
        d=3,
        epsilon=2.0,
        delta=1e-6,
        loss="huber",
        h=0.25,
        regularization=0.1,
        iterations=40,
    )
    det = cal.details
    assert det["c"] == 2.0
    assert det["smoothness_bound"] == pytest.approx(2.1)
    assert det["z0"] == pytest.approx(1 / 2.1)
    assert det["momentum"] == pytest.approx((math.sqrt(21) - 1) / (math.sqrt(21) + 1))
    assert det["averaging_from"] == 20
    assert cal.rounds == 40
    assert any("fresh noise" in note for note in cal.notes)
    # λ = 10⁻⁴, logistic: κ = 2501, (√κ − 1)/(√κ + 1) ≈ 0.96 is capped at 0.9
    small = federated_calibrate(
        "psgd", site_sizes=(100, 100), d=2, epsilon=1.0, delta=1e-6, regularization=1e-4
    )
    assert small.details["momentum"] == psgd.MAX_MOMENTUM == 0.9
    constant = _cal(1.0, 1e-5, step_size="constant")
    assert constant.details["momentum"] == 0.0


def test_delta_must_be_positive() -> None:
    with pytest.raises(PrivacyParameterError, match="0 < delta < 1"):
        federated_calibrate("psgd", site_sizes=(100,), d=2, epsilon=1.0, regularization=0.1)


@pytest.mark.parametrize(
    ("params", "rule"),
    [
        ({"iterations": 0}, "iterations must be an integer between 1"),
        ({"step_size": "adam"}, "step_size must be one of"),
        ({"zcdp_conversion": "rdp"}, "zcdp_conversion must be one of"),
        ({"learning_rate": 0.1}, "unknown parameter"),
    ],
)
def test_bad_params(params: dict[str, Any], rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        _cal(1.0, 1e-5, **params)


def test_every_answer_is_on_the_grid_and_carries_fresh_noise() -> None:
    # two answers at the same point share no noise: their difference is N(0, 2σ²) per
    # coordinate, never 0 (a fixed share would cancel and leave an exact difference)
    (X, y), *_ = make_sites((60,), 3, seed=4)
    site = psgd.PSGDSite(0, X, y, LogisticLoss())
    rng = np.random.default_rng(5)
    w = np.array([0.3, -0.1, 0.2])
    sigma = 1e-3
    answers = np.array([site.noisy_gradient(w, sigma, rng) for _ in range(400)])
    cells = answers / GAMMA
    np.testing.assert_array_equal(cells, np.round(cells))
    differences = answers[1:] - answers[:-1]
    spread = differences.std(axis=0)
    np.testing.assert_allclose(spread, math.sqrt(2.0) * sigma, rtol=0.15)


def _cell_pvalues(site_sigma_cells: float, answer_sigma_cells: float) -> list[float]:
    """Chi-square p-values of one site's released answers (coordinate by coordinate) against
    the cell probabilities of N(S, σ²) on the grid, P(k) = Φ((k + ½ − S/γ)/s) −
    Φ((k − ½ − S/γ)/s), s = ``site_sigma_cells`` (the claimed σ in cells), with S the gradient
    sum as computed and the site actually drawing with ``answer_sigma_cells``."""
    (X, y), *_ = make_sites((40,), 2, seed=3)
    site = psgd.PSGDSite(0, X, y, LogisticLoss())
    w = np.array([0.4, -0.2])
    slopes = LogisticLoss().derivative(y * (X @ w)) * y
    caps = clipping.clip_caps(clipping.row_norm_bounds(X), 1.0)
    centre = clipping.clipped_sum(slopes, X, caps)
    rng = np.random.default_rng(11)
    draws = 4000
    cells = np.array(
        [site.noisy_gradient(w, answer_sigma_cells * GAMMA, rng) / GAMMA for _ in range(draws)]
    )
    out = []
    for j in range(2):
        mu = centre[j] / GAMMA  # exact
        base = math.floor(mu)
        frac = mu - base
        support = np.arange(-8, 10)
        probs = stats.norm.cdf((support + 0.5 - frac) / site_sigma_cells) - stats.norm.cdf(
            (support - 0.5 - frac) / site_sigma_cells
        )
        offsets = cells[:, j] - base
        observed = np.array([(offsets == k).sum() for k in support])
        observed = np.append(observed, draws - observed.sum())
        expected = draws * np.append(probs, 1.0 - probs.sum())
        keep = expected > 5
        observed = np.append(observed[keep], observed[~keep].sum())
        expected = np.append(expected[keep], expected[~keep].sum())
        out.append(float(stats.chisquare(observed, expected).pvalue))
    return out


@pytest.mark.statistical
def test_released_answers_follow_the_exact_cell_probabilities() -> None:
    assert min(_cell_pvalues(1.3, 1.3)) > 1e-4


@pytest.mark.statistical
def test_the_law_test_rejects_half_the_noise() -> None:
    assert max(_cell_pvalues(1.3, 0.65)) < 1e-6


def test_with_a_huge_budget_the_model_reaches_the_regularised_minimiser() -> None:
    sites = make_sites((200, 300), 3, seed=6)
    X, y = pooled(sites)
    reference = minimize_erm(X, y, LogisticLoss(), regularization=0.1)
    result = federated_fit(
        sites,
        "psgd",
        epsilon=1e9,
        delta=1e-5,
        regularization=0.1,
        iterations=400,
        rng=np.random.default_rng(0),
    )
    assert np.linalg.norm(result.coef - reference) < 1e-3


def test_seeded_fits_are_reproducible_and_on_the_grid() -> None:
    sites = make_sites((100, 150), 3, seed=2)

    def run(seed: int) -> np.ndarray:
        result = federated_fit(
            sites,
            "psgd",
            epsilon=1.0,
            delta=1e-5,
            regularization=0.1,
            iterations=30,
            rng=np.random.default_rng(seed),
        )
        assert result.rounds_run == 30
        return np.asarray(result.coef)

    np.testing.assert_array_equal(run(7), run(7))
    assert not np.array_equal(run(7), run(8))
    coef = run(3)
    np.testing.assert_array_equal(coef, np.round(coef * 2.0**32) / 2.0**32)
