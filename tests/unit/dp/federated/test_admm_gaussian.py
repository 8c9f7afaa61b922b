"""admm with ``noise: "gaussian"``: Gaussian primal perturbation accounted in zCDP.

Hand-derived numbers: the largest total ρ for (ε, δ) (Bun–Steinke in closed form, CKS by a
brute-force grid over the Rényi order), each site's σ_p = Δ_p(1 + S)/√(2ρ/T) with
Δ_p = 2/(λB_p + 2NηN_p), and the law of what the sites release (KS against N(0, σ²) with σ
computed here, not read from the calibration).
"""

from __future__ import annotations

import copy
import math
from functools import partial
from typing import Any

import numpy as np
import pytest
from scipy import stats

from service.dp.core.accounting import zcdp_to_dp_cks
from service.dp.core.losses import LogisticLoss
from service.dp.federated import admm, federated_calibrate, federated_fit
from service.dp.federated.distributed_lasso import max_rho
from service.dp.optimize.solvers import minimize_erm
from tests.unit.dp.federated._data import make_sites, pooled

LN_1E5 = math.log(1e5)  # ln(1/δ) at δ = 1e-5: 11.512925…
#: Bun–Steinke: ε = ρ + 2√(ρ ln(1/δ)) ⇔ √ρ = √(ln(1/δ) + ε) − √(ln(1/δ)); at ε = 1, δ = 1e-5:
#: (√12.512925 − √11.512925)² = (3.5373614 − 3.3930701)² = 0.020819938…
RHO_BS_EPS1 = 0.02081993834


def _cks_epsilon_by_grid(rho: float, delta: float) -> float:
    """CKS Cor. 13 minimised over a dense grid of Rényi orders α = 1 + e^t."""
    am1 = np.exp(np.linspace(-12.0, 12.0, 400_001))
    alpha = 1.0 + am1
    eps = alpha * rho + (np.log(1.0 / delta) + am1 * np.log(am1 / alpha) - np.log(alpha)) / am1
    return float(np.min(eps))


def _gauss(sizes: tuple[int, ...], eps: float = 1.0, **params: Any) -> Any:
    delta = params.pop("delta", 1e-5)
    lam = params.pop("regularization", 0.1)
    return federated_calibrate(
        "admm",
        site_sizes=sizes,
        d=3,
        epsilon=eps,
        delta=delta,
        regularization=lam,
        noise="gaussian",
        **params,
    )


# --- accounting -------------------------------------------------------------------------------


def test_bun_steinke_budget_is_the_closed_form() -> None:
    rho = max_rho(1.0, 1e-5, "bun_steinke")
    assert rho == pytest.approx(RHO_BS_EPS1, rel=1e-9)
    assert rho + 2.0 * math.sqrt(rho * LN_1E5) <= 1.0
    assert rho + 2.0 * math.sqrt(rho * LN_1E5) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(("eps", "delta"), [(1.0, 1e-5), (0.5, 1e-6), (2.0, 1e-5)])
def test_cks_budget_converts_back_to_epsilon_and_beats_bun_steinke(
    eps: float, delta: float
) -> None:
    rho = max_rho(eps, delta, "cks")
    grid = _cks_epsilon_by_grid(rho, delta)
    assert grid == pytest.approx(eps, abs=1e-6)
    assert zcdp_to_dp_cks(rho, delta).epsilon <= eps
    # the tighter conversion buys a larger ρ, i.e. less noise
    assert rho > max_rho(eps, delta, "bun_steinke") * 1.1


def test_calibration_matches_hand_derived_sigma() -> None:
    # K = 2 (one neighbour each), N = 400, λ = 0.1, η = 0.05, T = 4:
    # Δ_1 = 2/(0.1·100 + 2·400·0.05·1) = 2/50 = 0.04, Δ_2 = 2/(30 + 40) = 0.0285714;
    # ρ per round = 0.0208199/4 = 0.00520498, √(2·0.00520498) = 0.1020292;
    # σ_p = Δ_p·(1 + 10⁻⁴)/0.1020292 = 0.3920836 and 0.2800597.
    cal = _gauss((100, 300), penalty=0.05, iterations=4, zcdp_conversion="bun_steinke")
    det = cal.details
    assert admm.SOLVER_SLACK == 1e-4
    assert det["rho_total"] == pytest.approx(RHO_BS_EPS1, rel=1e-9)
    assert det["rho_per_round"] == pytest.approx(RHO_BS_EPS1 / 4, rel=1e-9)
    assert [s["sensitivity_exact_minimiser"] for s in det["sites"]] == pytest.approx(
        [0.04, 2.0 / 70.0], rel=1e-12
    )
    assert [s["sigma"] for s in det["sites"]] == pytest.approx([0.3920836, 0.2800597], rel=1e-6)
    assert [s["gradient_bound"] for s in det["sites"]] == pytest.approx([1e-6, 1e-4 / 300])
    # charged exactly what was offered; the conversion of the composed ρ reaches it
    assert [(c.epsilon, c.delta) for c in cal.site_costs] == [(1.0, 1e-5), (1.0, 1e-5)]
    assert det["epsilon_spent"] == pytest.approx(1.0, abs=1e-9)
    assert det["epsilon_spent"] <= 1.0
    assert cal.rounds == 4
    assert "zCDP" in cal.composition
    assert "Bun–Steinke" in cal.composition


def test_cks_is_the_default_conversion_and_adds_less_noise() -> None:
    cks = _gauss((100, 300), penalty=0.05, iterations=4)
    bs = _gauss((100, 300), penalty=0.05, iterations=4, zcdp_conversion="bun_steinke")
    assert cks.details["zcdp_conversion"] == "cks"
    rho = cks.details["rho_total"]
    assert _cks_epsilon_by_grid(rho, 1e-5) == pytest.approx(1.0, abs=1e-6)
    assert cks.details["epsilon_bun_steinke"] == pytest.approx(
        rho + 2.0 * math.sqrt(rho * LN_1E5), rel=1e-12
    )
    for a, b in zip(cks.details["sites"], bs.details["sites"], strict=True):
        # σ ∝ 1/√ρ: the ratio is √(ρ_BS/ρ_CKS)
        assert a["sigma"] / b["sigma"] == pytest.approx(math.sqrt(RHO_BS_EPS1 / rho), rel=1e-6)


def test_defaults_come_from_public_quantities() -> None:
    cal = _gauss((100, 300, 500), regularization=0.01)
    det = cal.details
    assert det["perturbation"] == "primal"
    assert det["iterations"] == 4
    assert det["iterations_default"] is True
    # η = 0.2·√(λ(c + λ))/(2K·N̄), logistic c = 1/4, complete graph on 3 sites (N̄ = 2):
    # 0.2·√(0.01·0.26)/12 = 0.2·0.0509902/12 = 8.49837e-4
    assert det["penalty"] == pytest.approx(8.49837e-4, rel=1e-5)
    # the defaults do not move with the sites' sizes, nor with ε or δ
    other = _gauss((5000, 7, 900), eps=0.3, delta=1e-8, regularization=0.01).details
    assert (other["iterations"], other["penalty"]) == (det["iterations"], det["penalty"])


@pytest.mark.parametrize(
    ("params", "rule"),
    [
        ({"perturbation": "dual"}, "primal perturbation only"),
        ({"perturbation": "none"}, "primal perturbation only"),
        ({"delta": 0.0}, "delta > 0"),
        ({"delta_prime": 1e-6}, "delta_prime applies"),
        ({"zcdp_conversion": "renyi"}, "zcdp_conversion must be one of"),
    ],
)
def test_bad_gaussian_params(params: dict[str, Any], rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        _gauss((100, 200), **params)


def test_zcdp_conversion_needs_gaussian_noise() -> None:
    with pytest.raises(ValueError, match='only to noise "gaussian"'):
        federated_calibrate(
            "admm",
            site_sizes=(100, 200),
            d=3,
            epsilon=1.0,
            delta=1e-5,
            regularization=0.1,
            zcdp_conversion="cks",
        )


# --- the released noise -----------------------------------------------------------------------


@pytest.mark.statistical
def test_one_round_release_minus_its_noiseless_value_is_gaussian_with_hand_sigma() -> None:
    """T = 1 on two sites: round 1 starts from zero broadcasts and duals, so site p's noiseless
    broadcast is the ridge minimiser with μ_p = λ + 2NηN_p/B_p, and the released model is
    ½(V_1 + V_2) = ½(f_1* + f_2*) + N(0, ((σ_1² + σ_2²)/4)I)."""
    sites = make_sites((150, 250), 3, seed=21)
    lam, eta, N = 0.1, 0.05, 400
    loss = LogisticLoss()
    noiseless = [
        minimize_erm(X, y, loss, regularization=lam + 2.0 * N * eta / X.shape[0]) for X, y in sites
    ]
    centre = 0.5 * (noiseless[0] + noiseless[1])
    # Δ_1 = 2/(0.1·150 + 2·400·0.05) = 2/55, Δ_2 = 2/(25 + 40) = 2/65; T = 1 so
    # σ_p = Δ_p(1 + 10⁻⁴)/√(2·0.0208199) = Δ_p·1.0001/0.2040585
    sig = [2.0 / 55.0 * 1.0001 / 0.2040585, 2.0 / 65.0 * 1.0001 / 0.2040585]
    sd = math.sqrt(sig[0] ** 2 + sig[1] ** 2) / 2.0
    rng = np.random.default_rng(17)
    z: list[float] = []
    for _ in range(400):
        result = federated_fit(
            sites,
            "admm",
            epsilon=1.0,
            delta=1e-5,
            regularization=lam,
            noise="gaussian",
            iterations=1,
            penalty=eta,
            zcdp_conversion="bun_steinke",
            rng=rng,
        )
        z.extend(result.coef - centre)
    draws = np.asarray(z)
    assert stats.kstest(draws / sd, "norm").pvalue > 1e-4
    # the test has the power to notice half or twice the noise
    assert stats.kstest(draws / (0.5 * sd), "norm").pvalue < 1e-6
    assert stats.kstest(draws / (2.0 * sd), "norm").pvalue < 1e-6


@pytest.mark.statistical
def test_a_later_round_adds_exactly_the_calibrated_gaussian_to_its_noiseless_step() -> None:
    """Round 2 of a site whose state (dual, own broadcast, warm start) comes from a noisy round
    1: the broadcast minus the same step solved without noise is N(0, σ²I), σ by hand."""
    (X, y), _ = make_sites((200, 200), 4, seed=3)
    lam, eta, N = 0.1, 0.02, 400
    # Δ = 2/(0.1·200 + 2·400·0.02·1) = 2/36; T = 2 (CKS is not hand-friendly: Bun–Steinke)
    # σ = Δ(1 + 10⁻⁴)/√(2·0.0208199/2) = (2/36)·1.0001/0.1442912
    sigma = 2.0 / 36.0 * 1.0001 / 0.1442912
    cal = federated_calibrate(
        "admm",
        site_sizes=(200, 200),
        d=4,
        epsilon=1.0,
        delta=1e-5,
        regularization=lam,
        noise="gaussian",
        iterations=2,
        penalty=eta,
        zcdp_conversion="bun_steinke",
    )
    site_cal = cal.details["sites"][0]
    assert site_cal["sigma"] == pytest.approx(sigma, rel=1e-6)
    rng = np.random.default_rng(8)
    u1, u2 = np.array([0.3, -0.2, 0.1, 0.0]), np.array([0.5, -0.4, 0.2, 0.1])
    bound = float(site_cal["gradient_bound"])
    diffs: list[float] = []
    for _ in range(300):
        site = admm.ADMMSite(0, X, y, loss=LogisticLoss(), regularization=lam, total=N, penalty=eta)
        noisy = partial(
            site.local_step,
            perturbation="primal",
            extra=0.0,
            zeta=0.0,
            rng=rng,
            sigma=sigma,
            gradient_bound=bound,
        )
        noisy([u1])
        site.dual_update([u1])
        twin = copy.deepcopy(site)
        released = noisy([u2])
        exact = twin.local_step([u2], perturbation="none", extra=0.0, zeta=0.0, rng=None)
        diffs.extend(released - exact)
    draws = np.asarray(diffs) / sigma
    assert stats.kstest(draws, "norm").pvalue > 1e-4
    assert stats.kstest(draws * 2.0, "norm").pvalue < 1e-6


# --- utility ----------------------------------------------------------------------------------


def test_gaussian_admm_with_a_huge_budget_approaches_the_minimiser() -> None:
    sites = make_sites((300, 400, 500), 4, seed=12)
    X, y = pooled(sites)
    lam = 0.05
    w_star = minimize_erm(X, y, LogisticLoss(), regularization=lam)
    result = federated_fit(
        sites,
        "admm",
        epsilon=1e6,
        delta=1e-5,
        regularization=lam,
        noise="gaussian",
        iterations=60,
        penalty=0.02,
        rng=np.random.default_rng(4),
    )
    assert np.linalg.norm(result.coef - w_star) < 1e-2 * max(1.0, float(np.linalg.norm(w_star)))
