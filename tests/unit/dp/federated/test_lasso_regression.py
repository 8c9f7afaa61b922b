"""distributed_lasso over numeric labels (task "regression", y ∈ [−1, 1]): the sensitivity is
the binary one, derived by hand on a worst-case neighbouring pair; the released noise is
N(0, σ²) (KS); the noise-free protocol reaches the centralised Lasso; the protocols that stay
binary refuse the task naming the one that fits it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import stats
from sklearn.linear_model import Lasso

from service.dp.core.validation import PrivacyParameterError
from service.dp.data import clipping
from service.dp.federated import (
    PROTOCOL_TASKS,
    federated_calibrate,
    federated_fit,
    protocols_for_task,
)
from service.dp.federated.distributed_lasso import LassoSite
from tests.unit.dp.federated._data import Sites, hand_sum_sensitivity, pooled


def regression_sites(sizes: tuple[int, ...], d: int, seed: int) -> Sites:
    """One (X, y) per size: rows in the unit ball, y = clip(x·w* + noise, −1, 1)."""
    rng = np.random.default_rng(seed)
    w_star = np.linspace(1.5, -1.0, d)
    sites: Sites = []
    for n in sizes:
        X = rng.normal(size=(n, d))
        X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
        y = np.clip(X @ w_star + 0.1 * rng.normal(size=n), -1.0, 1.0)
        sites.append((X, y))
    return sites


def _calibrate(task: str, **params: Any) -> Any:
    return federated_calibrate(
        "distributed_lasso",
        site_sizes=(300, 500),
        d=6,
        epsilon=1.0,
        delta=1e-5,
        loss="squared",
        regularization=0.01,
        task=task,  # type: ignore[arg-type]
        iterations=50,
        **params,
    )


def test_numeric_labels_are_calibrated_as_binary_ones_and_the_record_names_the_task() -> None:
    binary, regression = _calibrate("binary"), _calibrate("regression")
    assert "task" not in binary.details  # a binary record stays as it was
    assert regression.details["task"] == "regression"
    assert regression.details["n_classes"] == 1
    assert {k: v for k, v in regression.details.items() if k not in ("task", "n_classes")} == (
        dict(binary.details)
    )
    assert regression.site_costs == binary.site_costs
    assert regression.plan == binary.plan
    # each site's σ_k is calibrated to Δ_k = 2C + 2E(n_k), which does not read y
    for site, n in zip(regression.details["sites"], (300, 500), strict=True):
        assert site["sensitivity"] >= float(hand_sum_sensitivity(n, 6, 1.0))


@pytest.mark.parametrize("clip", [1.0, 0.25])
def test_a_replaced_row_moves_the_clipped_sum_by_at_most_2c_whatever_the_labels(
    clip: float,
) -> None:
    """Hand derivation: each released term is â·x with |â|·‖x‖ < C, so replacing (x, y) by
    (x′, y′) moves the exact sum by ≤ ‖â x‖ + ‖â′ x′‖ < 2C, and the computed sums by at most
    2C + 2E(n) (the hand-written :func:`hand_sum_sensitivity`). The worst pair for numeric
    labels: the same row x (‖x‖ = 1) with the extreme labels y = +1 and y′ = −1 at an
    iterate v ⟂ x, whose residuals vᵀx − y = ∓1 give the opposite terms −x and +x."""
    ((X, y),) = regression_sites((60,), 4, seed=5)
    v = np.array([0.8, 0.6, 1.0, 0.5])
    x = np.array([0.6, -0.8, 0.0, 0.0])  # ‖x‖ = 1, vᵀx = 0
    X[0], y[0] = x, 1.0
    y2 = y.copy()
    y2[0] = -1.0
    caps = clipping.clip_caps(clipping.row_norm_bounds(X), clip)
    sums = [clipping.clipped_sum(X @ v - labels, X, caps) for labels in (y, y2)]
    moved = float(np.linalg.norm(sums[0] - sums[1]))
    # each term is clipped to just below min(1, C), in opposite directions
    assert moved == pytest.approx(2 * min(1.0, clip), rel=1e-12)
    assert moved < 2 * clip
    assert moved <= float(hand_sum_sensitivity(60, 4, clip))
    # unclipped, the pair moves the sum by 2‖x‖ = 2, more than 2C when C < 1: the clip, not
    # |y| ≤ 1, bounds the sensitivity
    unclipped = X.T @ (X @ v - y) - X.T @ (X @ v - y2)
    assert np.linalg.norm(unclipped) == pytest.approx(2.0, rel=1e-12)


@pytest.mark.statistical
def test_the_noise_released_with_numeric_labels_is_gaussian_with_the_calibrated_sigma() -> None:
    """KS of one site's released answers minus the clipped sum against N(0, σ²), per
    coordinate (σ = 0.5: the 2⁻³² release grid is negligible at this scale)."""
    ((X, y),) = regression_sites((50,), 3, seed=8)
    site = LassoSite(0, X, y)
    w = np.array([0.3, -0.6, 0.2])
    caps = clipping.clip_caps(clipping.row_norm_bounds(X), 1.0)
    centre = clipping.clipped_sum(X @ w - y, X, caps)
    sigma = 0.5
    rng = np.random.default_rng(21)
    noise = np.array(
        [site.gradient_sum(w, clip=1.0, sigma=sigma, rng=rng) - centre for _ in range(3000)]
    )
    for j in range(3):
        assert stats.kstest(noise[:, j], "norm", args=(0.0, sigma)).pvalue > 1e-4
        # control: the same test rejects a scale off by a fifth either way
        for wrong in (0.8, 1.25):
            assert stats.kstest(noise[:, j], "norm", args=(0.0, wrong * sigma)).pvalue < 1e-4


def test_without_noise_numeric_labels_reach_the_centralised_lasso() -> None:
    sites = regression_sites((200, 300), 5, seed=4)
    X, y = pooled(sites)
    assert 0.0 < np.abs(y).max() <= 1.0
    assert len(np.unique(y)) > 2  # numbers, not classes
    reference = Lasso(alpha=0.01, fit_intercept=False, tol=1e-14, max_iter=100_000).fit(X, y)
    result = federated_fit(
        sites,
        "distributed_lasso",
        epsilon=float("inf"),
        loss="squared",
        regularization=0.01,
        task="regression",
        noise=False,
        iterations=3000,
    )
    np.testing.assert_allclose(result.coef, reference.coef_, atol=1e-6)
    assert result.calibration.details["task"] == "regression"


def test_numeric_labels_outside_the_unit_interval_are_refused() -> None:
    sites = regression_sites((30, 40), 3, seed=1)
    sites[1][1][0] = 1.5
    with pytest.raises(PrivacyParameterError, match=r"site 1: .*\[-1, 1\].*1 entries"):
        federated_fit(
            sites,
            "distributed_lasso",
            epsilon=1.0,
            delta=1e-5,
            loss="squared",
            regularization=0.01,
            task="regression",
        )


def test_the_lasso_and_the_noisy_average_fit_numeric_labels_and_only_the_average_classes() -> None:
    assert protocols_for_task("regression") == ("noisy_average", "distributed_lasso")
    assert protocols_for_task("multiclass") == ("noisy_average",)
    assert all("binary" in tasks for tasks in PROTOCOL_TASKS.values())
    for protocol, loss in (("psgd", "logistic"), ("admm", "huber")):
        with pytest.raises(
            PrivacyParameterError, match="the protocols that fit it: noisy_average, distributed"
        ):
            federated_calibrate(
                protocol,
                site_sizes=(100, 100),
                d=3,
                epsilon=1.0,
                delta=1e-5,
                loss=loss,
                regularization=0.05,
                task="regression",
            )
    with pytest.raises(PrivacyParameterError, match="the protocols that fit it: noisy_average"):
        federated_fit(
            regression_sites((30, 30), 3, seed=2),
            "distributed_lasso",
            epsilon=1.0,
            delta=1e-5,
            loss="squared",
            regularization=0.01,
            task="multiclass",
        )
