"""noisy_average: β = K·n_min·λ·ε/2 and per-site ε_i = ε·n_min/n_i against hand arithmetic; the
released noise follows the calibrated law."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from service.dp.federated import federated_calibrate, federated_fit
from service.dp.losses import HuberLoss, LogisticLoss
from service.dp.solvers import minimize_erm
from tests.unit.dp.federated._data import make_sites


@pytest.mark.parametrize(
    ("sizes", "lam", "eps", "beta", "sensitivity", "site_eps"),
    [
        # β = 3·300·0.05·5/2 = 112.5; 2/(3·300·0.05) = 2/45; ε_i = 5·300/n_i = 5, 3, 1.875
        ((300, 500, 800), 0.05, 5.0, 112.5, 2 / 45, (5.0, 3.0, 1.875)),
        # ten equal sites: β = 10·3000·0.001·1/2 = 15; 2/(10·3000·0.001) = 1/15
        ((3000,) * 10, 0.001, 1.0, 15.0, 1 / 15, (1.0,) * 10),
        # one site is output perturbation: β = nλε/2 = 1000·0.01·0.5/2 = 2.5
        ((1000,), 0.01, 0.5, 2.5, 0.2, (0.5,)),
    ],
)
def test_calibration(
    sizes: tuple[int, ...],
    lam: float,
    eps: float,
    beta: float,
    sensitivity: float,
    site_eps: tuple[float, ...],
) -> None:
    cal = federated_calibrate(
        "noisy_average", site_sizes=sizes, d=7, epsilon=eps, regularization=lam
    )
    assert cal.details["beta"] == pytest.approx(beta, rel=1e-12)
    assert cal.details["sensitivity"] == pytest.approx(sensitivity, rel=1e-12)
    assert cal.details["expected_noise_norm"] == pytest.approx(7 / beta, rel=1e-12)
    assert [c.epsilon for c in cal.site_costs] == pytest.approx(site_eps, rel=1e-12)
    assert all(c.delta == 0.0 and c.epsilon <= eps for c in cal.site_costs)
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
    beta = 3 * 60 * lam * eps / 2  # = 90
    rng = np.random.default_rng(2024)
    norms = []
    directions = []
    for _ in range(400):
        result = federated_fit(sites, "noisy_average", epsilon=eps, regularization=lam, rng=rng)
        noise = result.coef - mean
        norms.append(float(np.linalg.norm(noise)))
        directions.append(noise / np.linalg.norm(noise))
    assert stats.kstest(norms, stats.gamma(a=3, scale=1 / beta).cdf).pvalue > 1e-4
    for wrong in (0.5, 2.0):  # half and twice the noise are rejected: the test has power
        assert stats.kstest(norms, stats.gamma(a=3, scale=wrong / beta).cdf).pvalue < 1e-4
    # the direction is uniform on the sphere: its first coordinate is Beta(1, 1) after (u+1)/2
    first = (np.array(directions)[:, 0] + 1.0) / 2.0
    assert stats.kstest(first, stats.uniform().cdf).pvalue > 1e-4
