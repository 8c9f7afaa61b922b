"""distributed_lasso: σ from the zCDP budget (closed-form Bun–Steinke inversion by hand, the
tighter CKS conversion against its own minimisation over a dense grid of Rényi orders), labels
for the non-private variant, and convergence to the centralised Lasso solution."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats
from sklearn.linear_model import Lasso

from service.dp.data import clipping
from service.dp.federated import federated_calibrate, federated_fit
from service.dp.federated.distributed_lasso import LassoSite, soft_threshold
from tests.unit.dp.federated._data import hand_sum_sensitivity, make_sites, pooled


def _cks_epsilon_by_grid(rho: float, delta: float) -> float:
    """Canonne–Kamath–Steinke (Cor. 13) ε of ρ-zCDP, minimised over a dense grid of Rényi
    orders α = 1 + e^t (independent of ``service.dp.core.accounting``)."""
    am1 = np.exp(np.linspace(-12.0, 12.0, 400_001))
    alpha = 1.0 + am1
    eps = alpha * rho + (np.log(1.0 / delta) + am1 * np.log(am1 / alpha) - np.log(alpha)) / am1
    return float(np.min(eps))


def _cal(eps: float, delta: float, **params: Any) -> Any:
    return federated_calibrate(
        "distributed_lasso",
        site_sizes=(300, 500),
        d=6,
        epsilon=eps,
        delta=delta,
        loss="squared",
        regularization=0.01,
        **params,
    )


def test_bun_steinke_sigma_by_hand() -> None:
    # ε = 1, δ = 1e-5, L = ln 1e5: ρ = (√(L + 1) − √L)² = 0.0208199383395355 in total,
    # ρ₁ = ρ/100 per round, σ = 2C/√(2ρ₁) = √2/√(ρ/100) = 98.01110337256824 for C = 1
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


@pytest.mark.parametrize("clip", [1.0, 0.5])
def test_each_site_scales_sigma_by_its_floating_point_margin(clip: float) -> None:
    # site k (n_k rows) adds N(0, σ_k²) with σ_k = σ·Δ_k/(2C), Δ_k = 2C + 2E(n_k) by hand:
    # the computed sum's sensitivity, so its rounds cost exactly the ρ₁ = (2C)²/(2σ²) shown
    cal = _cal(1.0, 1e-5, iterations=100, clip=clip)
    det = cal.details
    sigma = Fraction(det["sigma"])
    for site, n in zip(det["sites"], (300, 500), strict=True):
        delta = hand_sum_sensitivity(n, 6, clip)
        margin = float(delta / (2 * Fraction(clip)) - 1)
        assert margin == pytest.approx(n * n * 2.0**-53, rel=1e-2)  # ≈ n²u
        assert site["n"] == n
        assert site["float_margin"] == pytest.approx(margin, rel=1e-9)
        assert Fraction(site["sensitivity"]) >= delta
        own = Fraction(site["sigma"])
        assert own >= sigma * delta / (2 * Fraction(clip))  # ρ_k ≤ ρ₁ exactly
        assert Fraction(math.nextafter(site["sigma"], 0.0)) < sigma * delta / (2 * Fraction(clip))
        assert site["sigma"] > det["sigma"]
        assert float(delta**2 / (2 * own**2)) <= det["rho_per_round"] * (1 + 1e-15)
    # the larger site has the larger margin; nothing public depends on it
    assert det["sites"][1]["sigma"] > det["sites"][0]["sigma"]
    assert str(det["sites"][1]["sigma"]) not in cal.composition


@pytest.mark.parametrize(
    ("eps", "delta", "T", "clip"), [(1.0, 1e-5, 100, 1.0), (0.3, 1e-6, 7, 0.5)]
)
def test_cks_round_trip_through_accounting(eps: float, delta: float, T: int, clip: float) -> None:
    cal = _cal(eps, delta, iterations=T, clip=clip)
    det = cal.details
    # Gaussian mechanism of ℓ₂ sensitivity 2C: ρ = (2C)²/(2σ²) per round, T rounds compose
    rho_round = (2 * clip) ** 2 / (2 * det["sigma"] ** 2)
    assert rho_round == pytest.approx(det["rho_per_round"], rel=1e-12)
    spent = _cks_epsilon_by_grid(T * rho_round, delta)
    assert spent == pytest.approx(eps, rel=1e-6)
    assert cal.site_costs[0].epsilon <= eps
    assert cal.site_costs[0].epsilon == pytest.approx(spent, rel=1e-6)
    # CKS is tighter than Bun–Steinke, so it needs less noise
    bs = _cal(eps, delta, iterations=T, clip=clip, zcdp_conversion="bun_steinke")
    assert det["sigma"] < bs.details["sigma"]
    rho = det["rho_total"]
    assert det["epsilon_bun_steinke"] == pytest.approx(
        rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta)), rel=1e-12
    )
    assert det["epsilon_bun_steinke"] > eps


def test_non_private_variant_is_labelled_and_charges_nothing() -> None:
    cal = _cal(float("nan"), 0.0, noise=False)
    assert not cal.private
    assert [(c.epsilon, c.delta) for c in cal.site_costs] == [(0.0, 0.0), (0.0, 0.0)]
    assert "not differentially private" in cal.notes[0]
    assert "no differential privacy" in cal.composition
    assert cal.details["sigma"] is None
    assert cal.details["accelerated"] is True


@pytest.mark.parametrize(
    ("params", "delta", "rule"),
    [
        ({}, 0.0, "needs 0 < delta < 1"),
        ({"step_size": 1.5}, 1e-5, "step_size must be ≤ 1"),
        ({"clip": -1.0}, 1e-5, "clip must be a finite number > 0"),
        ({"noise": False, "clip": 2.0}, 0.0, "clip applies only with noise"),
        ({"noise": "no"}, 1e-5, "noise must be true or false"),
        ({"zcdp_conversion": "rdp"}, 1e-5, "zcdp_conversion must be one of"),
        ({"l1": 0.1}, 1e-5, "unknown parameter"),
    ],
)
def test_bad_params(params: dict[str, Any], delta: float, rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        _cal(1.0, delta, **params)


def test_loss_must_be_squared() -> None:
    with pytest.raises(ValueError, match="supports the loss 'squared'"):
        federated_calibrate(
            "distributed_lasso", site_sizes=(10,), d=2, epsilon=1.0, delta=1e-5, regularization=0.1
        )


def test_soft_threshold() -> None:
    a = np.array([3.0, -0.5, 0.2, -2.0, 0.0])
    np.testing.assert_array_equal(soft_threshold(a, 1.0), [2.0, -0.0, 0.0, -1.0, 0.0])


# The plain iteration needs 6,000 rounds (≈ 2 s of CPU) to reach what the accelerated one
# reaches in 2,000: the default tier runs the accelerated one, the heavy tier both (issue 27 §5).
@pytest.mark.parametrize("accelerated", [True, pytest.param(False, marks=pytest.mark.heavy)])
def test_without_noise_reaches_the_centralised_lasso(accelerated: bool) -> None:
    sites = make_sites((200, 300, 250), 5, seed=4)
    X, y = pooled(sites)
    lam1 = 0.02
    reference = Lasso(alpha=lam1, fit_intercept=False, tol=1e-14, max_iter=100_000).fit(X, y)
    result = federated_fit(
        sites,
        "distributed_lasso",
        epsilon=float("inf"),
        loss="squared",
        regularization=lam1,
        noise=False,
        accelerated=accelerated,
        iterations=2000 if accelerated else 6000,
    )
    np.testing.assert_allclose(result.coef, reference.coef_, atol=1e-6)
    # the L1 penalty produces exact zeros, as the centralised solution does
    assert np.array_equal(result.coef == 0.0, reference.coef_ == 0.0)


def test_with_noise_and_a_huge_budget_stays_close_to_the_clipped_solution() -> None:
    sites = make_sites((200, 300), 4, seed=6)
    X, y = pooled(sites)
    reference = Lasso(alpha=0.02, fit_intercept=False, tol=1e-12, max_iter=100_000).fit(X, y)
    # clip = 3 never binds here (|wᵀx − y| ≤ 1 + ‖w‖ < 3), so only the tiny noise differs
    result = federated_fit(
        sites,
        "distributed_lasso",
        epsilon=1e9,
        delta=1e-5,
        loss="squared",
        regularization=0.02,
        clip=3.0,
        accelerated=True,
        iterations=2000,
        rng=np.random.default_rng(0),
    )
    assert np.linalg.norm(result.coef - reference.coef_) < 1e-3
    assert math.isfinite(result.calibration.details["sigma"])


GAMMA = 2.0**-32


def test_every_site_answer_lies_on_the_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[np.ndarray] = []
    original = LassoSite.gradient_sum

    def spy(self: LassoSite, w: np.ndarray, **kw: Any) -> np.ndarray:
        out = original(self, w, **kw)
        answers.append(out)
        return out

    monkeypatch.setattr(LassoSite, "gradient_sum", spy)
    sites = make_sites((200, 300), 4, seed=6)
    federated_fit(
        sites,
        "distributed_lasso",
        epsilon=1.0,
        delta=1e-5,
        loss="squared",
        regularization=0.02,
        iterations=20,
        rng=np.random.default_rng(1),
    )
    assert len(answers) == 2 * 20
    grid = np.array(answers) / GAMMA
    np.testing.assert_array_equal(grid, np.round(grid))


def test_seeded_noisy_fits_are_reproducible() -> None:
    sites = make_sites((150, 250), 5, seed=2)

    def run(seed: int) -> np.ndarray:
        result = federated_fit(
            sites,
            "distributed_lasso",
            epsilon=2.0,
            delta=1e-5,
            loss="squared",
            regularization=0.02,
            iterations=30,
            rng=np.random.default_rng(seed),
        )
        assert result.coef is not None
        return np.asarray(result.coef)

    np.testing.assert_array_equal(run(7), run(7))
    assert not np.array_equal(run(7), run(8))


@pytest.mark.statistical
def test_released_noisy_sums_follow_the_exact_cell_probabilities() -> None:
    """Chi-square of one site's released answers, coordinate by coordinate, against the cell
    probabilities of N(S, σ²) on the grid: P(k) = Φ((k + ½ − S/γ)/(σ/γ)) − Φ((k − ½ − S/γ)/(σ/γ)),
    with S the clipped sum as computed (off the grid) and σ = 1.3 cells, so every cell's
    probability is resolved."""
    (X, y), *_ = make_sites((40,), 2, seed=3)
    site = LassoSite(0, X, y)
    w = np.array([0.4, -0.2])
    residual = X @ w - y
    caps = clipping.clip_caps(clipping.row_norm_bounds(X), 1.0)
    centre = clipping.clipped_sum(residual, X, caps)
    sigma = 1.3 * GAMMA
    rng = np.random.default_rng(11)
    draws = 4000
    cells = np.array(
        [site.gradient_sum(w, clip=1.0, sigma=sigma, rng=rng) / GAMMA for _ in range(draws)]
    )
    for j in range(2):
        mu = centre[j] / GAMMA  # exact
        base = math.floor(mu)
        frac = mu - base  # exact
        support = np.arange(-6, 8)
        upper = stats.norm.cdf((support + 0.5 - frac) / 1.3)
        lower = stats.norm.cdf((support - 0.5 - frac) / 1.3)
        probs = upper - lower
        offsets = cells[:, j] - base
        observed = np.array([(offsets == k).sum() for k in support])
        observed = np.append(observed, draws - observed.sum())
        expected = draws * np.append(probs, 1.0 - probs.sum())
        keep = expected > 5
        observed = np.append(observed[keep], observed[~keep].sum())
        expected = np.append(expected[keep], expected[~keep].sum())
        assert stats.chisquare(observed, expected).pvalue > 1e-4
