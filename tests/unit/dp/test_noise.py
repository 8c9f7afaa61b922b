"""Noise samplers: every law by KS test on both the CSPRNG and the seeded path, the open
interval of the uniforms, the release grid, parameter rejection."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from service.dp import noise

N = 4000
#: A KS p-value below this fails the test (seeded runs are deterministic; the CSPRNG ones
#: would fail spuriously once in 10^4 runs).
P_MIN = 1e-4


def _paths() -> list[np.random.Generator | None]:
    return [np.random.default_rng(20240601), None]


PATH_IDS = ["seeded", "csprng"]


class _ZeroGenerator:
    """A stand-in generator whose ``random`` returns exact zeros (probability 2^-53 per draw
    for a real generator)."""

    def random(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.zeros(shape)


def test_uniforms_shape_and_open_interval() -> None:
    for rng in _paths():
        u = noise.uniforms((50, 3), rng)
        assert u.shape == (50, 3)
        assert u.dtype == np.float64
        assert np.all(u > 0.0)
        assert np.all(u < 1.0)


@pytest.mark.parametrize("byte", [0x00, 0xFF])
def test_csprng_uniforms_never_hit_0_or_1(monkeypatch: pytest.MonkeyPatch, byte: int) -> None:
    # The extreme 64-bit words: all zeros gives the smallest uniform, all ones the largest.
    monkeypatch.setattr("os.urandom", lambda k: bytes([byte]) * k)
    u = noise.uniforms(8)
    assert np.all(u > 0.0)
    assert np.all(u < 1.0)
    expected = 2.0**-53 if byte == 0 else 1.0 - 2.0**-53
    assert np.all(u == expected)
    # and the inverse CDFs stay finite at those extremes
    assert np.all(np.isfinite(noise.gaussian(8)))
    assert np.all(np.isfinite(noise.laplace(8, scale=1.0)))
    assert np.all(np.isfinite(noise.gamma(8, shape=3.0, scale=1.0)))


def test_generator_uniforms_never_return_zero() -> None:
    fake = _ZeroGenerator()
    u = noise.uniforms(5, fake)  # type: ignore[arg-type]
    assert np.all(u == 2.0**-53)
    assert np.all(np.isfinite(noise.gaussian(5, rng=fake)))  # type: ignore[arg-type]


@pytest.mark.statistical
@pytest.mark.parametrize("rng", _paths(), ids=PATH_IDS)
def test_uniforms_are_uniform(rng: np.random.Generator | None) -> None:
    assert stats.kstest(noise.uniforms(N, rng), "uniform").pvalue > P_MIN


@pytest.mark.statistical
@pytest.mark.parametrize("rng", _paths(), ids=PATH_IDS)
def test_gaussian_law(rng: np.random.Generator | None) -> None:
    x = noise.gaussian(N, sigma=2.5, rng=rng)
    assert stats.kstest(x, stats.norm(scale=2.5).cdf).pvalue > P_MIN
    v = noise.gaussian_vector(7, sigma=1.0, rng=rng)
    assert v.shape == (7,)


@pytest.mark.statistical
@pytest.mark.parametrize("rng", _paths(), ids=PATH_IDS)
def test_laplace_law(rng: np.random.Generator | None) -> None:
    x = noise.laplace(N, scale=0.7, rng=rng)
    assert stats.kstest(x, stats.laplace(scale=0.7).cdf).pvalue > P_MIN


@pytest.mark.statistical
@pytest.mark.parametrize("rng", _paths(), ids=PATH_IDS)
@pytest.mark.parametrize(("shape", "scale"), [(1.0, 2.0), (3.5, 0.5), (105.0, 1.0 / 15.0)])
def test_gamma_law(rng: np.random.Generator | None, shape: float, scale: float) -> None:
    x = noise.gamma(N, shape=shape, scale=scale, rng=rng)
    assert stats.kstest(x, stats.gamma(shape, scale=scale).cdf).pvalue > P_MIN


@pytest.mark.statistical
@pytest.mark.parametrize("rng", _paths(), ids=PATH_IDS)
def test_uniform_direction_law(rng: np.random.Generator | None) -> None:
    d = 5
    dirs = np.array([noise.uniform_direction(d, rng=rng) for _ in range(N)])
    np.testing.assert_allclose(np.linalg.norm(dirs, axis=1), 1.0, rtol=1e-12)
    # For a uniform point on S^{d−1}, (u_k + 1)/2 ~ Beta((d−1)/2, (d−1)/2) for every k.
    law = stats.beta((d - 1) / 2, (d - 1) / 2)
    for k in (0, d - 1):
        assert stats.kstest((dirs[:, k] + 1.0) / 2.0, law.cdf).pvalue > P_MIN


def test_uniform_direction_in_one_dimension_is_a_sign() -> None:
    rng = np.random.default_rng(3)
    signs = np.array([noise.uniform_direction(1, rng=rng)[0] for _ in range(400)])
    assert set(np.unique(signs)) == {-1.0, 1.0}
    assert 150 < np.sum(signs > 0) < 250


@pytest.mark.statistical
@pytest.mark.parametrize("rng", _paths(), ids=PATH_IDS)
def test_norm_exponential_vector_law(rng: np.random.Generator | None) -> None:
    d, beta = 4, 2.5
    draws = np.array([noise.norm_exponential_vector(d, beta=beta, rng=rng) for _ in range(N)])
    norms = np.linalg.norm(draws, axis=1)
    # density ∝ exp(−β‖b‖) in R^d: ‖b‖ ~ Gamma(d, 1/β), direction uniform and independent
    assert stats.kstest(norms, stats.gamma(d, scale=1.0 / beta).cdf).pvalue > P_MIN
    dirs = draws / norms[:, None]
    law = stats.beta((d - 1) / 2, (d - 1) / 2)
    assert stats.kstest((dirs[:, 0] + 1.0) / 2.0, law.cdf).pvalue > P_MIN
    # independence of norm and direction: direction law is the same for small and large norms
    big = norms > np.median(norms)
    assert stats.ks_2samp(dirs[big, 0], dirs[~big, 0]).pvalue > P_MIN
    assert abs(norms.mean() - d / beta) < 4 * math.sqrt(d) / beta / math.sqrt(N)


def test_seeded_draws_are_reproducible() -> None:
    a = noise.norm_exponential_vector(6, beta=1.0, rng=np.random.default_rng(11))
    b = noise.norm_exponential_vector(6, beta=1.0, rng=np.random.default_rng(11))
    c = noise.norm_exponential_vector(6, beta=1.0, rng=np.random.default_rng(12))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_csprng_draws_differ() -> None:
    assert not np.array_equal(noise.gaussian(4), noise.gaussian(4))


def test_round_to_grid() -> None:
    rng = np.random.default_rng(5)
    values = rng.normal(scale=100.0, size=1000)
    rounded = noise.round_to_grid(values)
    grid = 2.0**-32
    assert grid == noise.RELEASE_GRID
    units = rounded / grid
    np.testing.assert_array_equal(units, np.round(units))
    assert np.max(np.abs(rounded - values)) <= grid / 2
    np.testing.assert_array_equal(noise.round_to_grid(rounded), rounded)
    assert noise.round_to_grid(np.array([0.3]), grid=0.25)[0] == 0.25
    assert noise.round_to_grid(np.array([0.4]), grid=0.25)[0] == 0.5


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_samplers_reject_bad_scales(bad: float) -> None:
    with pytest.raises(ValueError, match="sigma"):
        noise.gaussian(3, sigma=bad)
    with pytest.raises(ValueError, match="scale"):
        noise.laplace(3, scale=bad)
    with pytest.raises(ValueError, match="shape"):
        noise.gamma(3, shape=bad, scale=1.0)
    with pytest.raises(ValueError, match="beta"):
        noise.norm_exponential_vector(3, beta=bad)


def test_uniform_direction_rejects_dimension_zero() -> None:
    with pytest.raises(ValueError, match="dimension"):
        noise.uniform_direction(0)
