"""Hypothesis transfer (``service.dp.transfer``): η = 0 is objective perturbation, a large η
returns the source model, η moves the fit towards the source, bad input is refused."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from service.dp import fit
from service.dp.noise import RELEASE_GRID
from service.dp.transfer import transfer_fit


def data(
    n: int = 400, d: int = 4, seed: int = 0
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    w = np.arange(1, d + 1, dtype=np.float64)
    y = np.where(X @ w + 0.1 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def test_zero_strength_is_objective_perturbation_with_the_same_noise() -> None:
    X, y = data()
    source = np.full(X.shape[1], 5.0)
    got = transfer_fit(
        X,
        y,
        source,
        epsilon=1.0,
        transfer_strength=0.0,
        regularization=0.05,
        rng=np.random.default_rng(7),
    )
    ref = fit(
        X,
        y,
        "objective_perturbation",
        epsilon=1.0,
        regularization=0.05,
        rng=np.random.default_rng(7),
    )
    assert got.coef is not None
    assert ref.coef is not None
    np.testing.assert_allclose(got.coef, ref.coef, atol=1e-8)
    assert got.epsilon == 1.0
    assert got.delta == 0.0
    assert got.details["epsilon_prime"] == ref.details["epsilon_prime"]
    assert got.details["transfer_strength"] == 0.0
    assert got.seeded


def test_strength_pulls_the_fit_towards_the_source() -> None:
    X, y = data()
    source = np.array([3.0, -2.0, 1.0, 0.5])
    distances = []
    last = source
    for eta in (0.0, 0.1, 1.0, 1e5):
        result = transfer_fit(
            X,
            y,
            source,
            epsilon=2.0,
            transfer_strength=eta,
            regularization=0.05,
            rng=np.random.default_rng(3),
        )
        assert result.coef is not None
        last = result.coef
        distances.append(float(np.linalg.norm(last - source)))
    assert distances == sorted(distances, reverse=True)
    assert distances[-1] < 1e-3
    assert np.all(np.round(last / RELEASE_GRID) * RELEASE_GRID == last)


@pytest.mark.parametrize(
    ("source", "eta", "message"),
    [
        ([1.0, 2.0], 1.0, "4 finite weights"),
        ([1.0, 2.0, 3.0, float("nan")], 1.0, "4 finite weights"),
        ([1.0, 2.0, 3.0, 4.0], -1.0, "transfer_strength"),
        ([1.0, 2.0, 3.0, 4.0], float("inf"), "transfer_strength"),
    ],
)
def test_bad_input_is_refused(source: list[float], eta: float, message: str) -> None:
    X, y = data()
    with pytest.raises(ValueError, match=message):
        transfer_fit(X, y, source, epsilon=1.0, transfer_strength=eta, regularization=0.05)
