"""distributed_lasso: σ from the zCDP budget (closed-form Bun–Steinke inversion by hand, the
tighter CKS conversion by round trip through ``accounting``), labels for the non-private
variant, and convergence to the centralised Lasso solution."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from sklearn.linear_model import Lasso

from service.dp.accounting import gaussian_zcdp, zcdp_to_dp, zcdp_to_dp_cks
from service.dp.federated import federated_calibrate, federated_fit
from service.dp.federated.distributed_lasso import soft_threshold
from tests.unit.dp.federated._data import make_sites, pooled


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
    for cost in cal.site_costs:
        assert cost.epsilon <= 1.0
        assert cost.epsilon == pytest.approx(1.0, rel=1e-9)
        assert cost.delta == 1e-5


@pytest.mark.parametrize(
    ("eps", "delta", "T", "clip"), [(1.0, 1e-5, 100, 1.0), (0.3, 1e-6, 7, 0.5)]
)
def test_cks_round_trip_through_accounting(eps: float, delta: float, T: int, clip: float) -> None:
    cal = _cal(eps, delta, iterations=T, clip=clip)
    det = cal.details
    rho_round = gaussian_zcdp(2 * clip, det["sigma"])
    assert rho_round == pytest.approx(det["rho_per_round"], rel=1e-12)
    spent = zcdp_to_dp_cks(T * rho_round, delta)
    assert spent.epsilon <= eps
    assert spent.epsilon == pytest.approx(eps, rel=1e-6)
    assert cal.site_costs[0].epsilon == pytest.approx(spent.epsilon, rel=1e-12)
    # CKS is tighter than Bun–Steinke, so it needs less noise
    bs = _cal(eps, delta, iterations=T, clip=clip, zcdp_conversion="bun_steinke")
    assert det["sigma"] < bs.details["sigma"]
    assert det["epsilon_bun_steinke"] == pytest.approx(zcdp_to_dp(det["rho_total"], delta).epsilon)
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


@pytest.mark.parametrize("accelerated", [True, False])
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
