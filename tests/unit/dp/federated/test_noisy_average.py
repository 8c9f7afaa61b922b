"""noisy_average: τ, β = ε/S with S = (2/(n_min λ) + 2τ/λ)/K + 2ρ and per-site ε_i = β·S_i
against hand arithmetic; the released noise follows the calibrated law."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from service.dp.core.losses import HuberLoss, LogisticLoss
from service.dp.federated import federated_calibrate, federated_fit
from service.dp.optimize.solvers import minimize_erm
from tests.unit.dp._laws import gamma_norms_fit_only_at_the_right_scale
from tests.unit.dp.federated._data import make_sites

U = 2.0**-53
KAPPA = 1 + 2.0**-20


def _gamma(k: int) -> float:
    return k * U / (1 - k * U) * KAPPA


@pytest.mark.parametrize(
    ("sizes", "lam", "eps", "tau", "beta", "sensitivity", "site_eps"),
    [
        # logistic (c = 1/4), d = 7: τ = 1e-10 + 8(4096 + 7)u + γ₇/λ (the same for every
        # site); ρ = (γ_{K−1} + u(1 + γ_{K−1}))(1 + τ)/λ·κ; S_i = (2/(n_i λ) + 2τ/λ)/K + 2ρ.
        # K = 3, λ = 0.05: τ = 1e-10 + 3.6442e-12 + 1.554e-14 = 1.0365974e-10, ρ ≈ 3u·20
        # = 6.66e-15, S = (2/15 + 4.146e-9)/3 + 1.33e-14 = 0.0444444458266; β = 5/S
        # = 112.4999965; ε_i = β·S_i = 5, 3.0000000622, 1.8750000972 (was 5·300/n_i)
        (
            (300, 500, 800),
            0.05,
            5.0,
            1.0365974e-10,
            112.49999650145018,
            0.044444445826587624,
            (5.0, 3.000000062196441, 1.875000097181939),
        ),
        # ten equal sites, λ = 0.001: τ = 1e-10 + 3.6442e-12 + 7.77e-13 = 1.0442135e-10,
        # S = (1/1500 + 2τ/0.001)/10 + 2ρ = 0.0666666875531577; β = 1/S = 14.9999953005
        (
            (3000,) * 10,
            0.001,
            1.0,
            1.0442135e-10,
            14.999995300540993,
            0.06666668755315769,
            (1.0,) * 10,
        ),
        # one site (output perturbation with the site's τ), λ = 0.01: β = 0.5/S = 2.49999974
        ((1000,), 0.01, 0.5, 1.0372191e-10, 2.4999997406949697, 0.20000002074440457, (0.5,)),
    ],
)
def test_calibration(
    sizes: tuple[int, ...],
    lam: float,
    eps: float,
    tau: float,
    beta: float,
    sensitivity: float,
    site_eps: tuple[float, ...],
) -> None:
    cal = federated_calibrate(
        "noisy_average", site_sizes=sizes, d=7, epsilon=eps, regularization=lam
    )
    K = len(sizes)
    exact_tau = 1e-10 + 8 * (4096 + 7) * U + 4 * 0.25 * _gamma(7) / lam
    rho = (_gamma(K - 1) + U * (1 + _gamma(K - 1))) * (1 + exact_tau) / lam * KAPPA
    assert cal.details["certificate_tolerance"] == pytest.approx(exact_tau, rel=1e-14)
    assert cal.details["certificate_tolerance"] == pytest.approx(tau, rel=1e-7)
    assert cal.details["mean_rounding_bound"] == pytest.approx(rho, rel=1e-12)
    assert cal.details["beta"] == pytest.approx(beta, rel=1e-13)
    assert cal.details["sensitivity"] == pytest.approx(sensitivity, rel=1e-13)
    assert cal.details["expected_noise_norm"] == pytest.approx(7 / beta, rel=1e-12)
    assert [c.epsilon for c in cal.site_costs] == pytest.approx(site_eps, rel=1e-12)
    assert all(c.delta == 0.0 and c.epsilon <= eps for c in cal.site_costs)
    # β·S_i ≤ ε_i exactly (S_i in rationals from the recorded doubles)
    for n, cost in zip(sizes, cal.site_costs, strict=True):
        s_i = (Fraction(2) / (n * Fraction(lam)) + 2 * Fraction(exact_tau) / Fraction(lam)) / K
        s_i += 2 * Fraction(cal.details["mean_rounding_bound"])
        assert Fraction(cal.details["beta"]) * s_i <= Fraction(cost.epsilon)
    assert cal.private
    assert cal.rounds == 1
    assert "trusted aggregator" in cal.notes[0]
    json.dumps(cal.details, allow_nan=False)


def test_delta_offered_is_not_spent() -> None:
    cal = federated_calibrate(
        "noisy_average", site_sizes=(100, 200), d=3, epsilon=1.0, delta=1e-5, regularization=0.1
    )
    assert all(c.delta == 0.0 for c in cal.site_costs)


def test_huber_width_is_used_and_recorded() -> None:
    cal = federated_calibrate(
        "noisy_average",
        site_sizes=(100, 200),
        d=3,
        epsilon=1.0,
        loss="huber",
        h=0.25,
        regularization=0.1,
    )
    assert cal.details["huber_h"] == 0.25
    assert cal.details["loss"] == "huber"


def test_release_is_average_of_exact_local_minimisers_plus_noise() -> None:
    sites = make_sites((120, 200, 150), 3, seed=5)
    lam = 0.1
    mean = np.mean(
        [minimize_erm(X, y, HuberLoss(h=0.5), regularization=lam) for X, y in sites], axis=0
    )
    # a huge ε makes the noise negligible: the release is the average of the local fits
    result = federated_fit(
        sites,
        "noisy_average",
        epsilon=1e9,
        loss="huber",
        regularization=lam,
        rng=np.random.default_rng(0),
    )
    np.testing.assert_allclose(result.coef, mean, atol=1e-6)
    assert result.rounds_run == 1
    assert result.seeded


@pytest.mark.statistical
def test_released_noise_norm_is_gamma_d_over_beta() -> None:
    sites = make_sites((60, 90, 75), 3, seed=11)
    lam, eps = 0.5, 2.0
    loss = LogisticLoss()
    mean = np.mean([minimize_erm(X, y, loss, regularization=lam) for X, y in sites], axis=0)
    # β = ε/S, S = (2/(60λ) + 2τ/λ)/3 + 2ρ with τ = 1e-10 + 8(4096 + 3)u + γ₃/λ (logistic)
    # = 1.0364e-10 and ρ = (γ₂ + u(1 + γ₂))(1 + τ)/λ·κ = 6u: S = 0.0222222223604, β = 89.99999944
    tau = 1e-10 + 8 * 4099 * U + _gamma(3) / lam
    rho = (_gamma(2) + U * (1 + _gamma(2))) * (1 + tau) / lam * KAPPA
    beta = eps / ((2 / (60 * lam) + 2 * tau / lam) / 3 + 2 * rho)
    assert beta == pytest.approx(89.99999944, rel=1e-9)
    rng = np.random.default_rng(2024)
    norms = []
    directions = []
    for _ in range(400):
        result = federated_fit(sites, "noisy_average", epsilon=eps, regularization=lam, rng=rng)
        noise = result.coef - mean
        norms.append(float(np.linalg.norm(noise)))
        directions.append(noise / np.linalg.norm(noise))
    # half and twice the noise are rejected: the test has power
    gamma_norms_fit_only_at_the_right_scale(norms, 3, beta)
    # the direction is uniform on the sphere: its first coordinate is Beta(1, 1) after (u+1)/2
    first = (np.array(directions)[:, 0] + 1.0) / 2.0
    assert stats.kstest(first, stats.uniform().cdf).pvalue > 1e-4
