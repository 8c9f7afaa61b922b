"""The uniforms (KS on both the CSPRNG and the seeded path, the open interval) and the release
grid; the float samplers are gone from the service."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from service.dp.noise import draws as noise

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


def test_generator_uniforms_never_return_zero() -> None:
    fake = _ZeroGenerator()
    u = noise.uniforms(5, fake)  # type: ignore[arg-type]
    assert np.all(u == 2.0**-53)


@pytest.mark.statistical
@pytest.mark.parametrize("rng", _paths(), ids=PATH_IDS)
def test_uniforms_are_uniform(rng: np.random.Generator | None) -> None:
    assert stats.kstest(noise.uniforms(N, rng), "uniform").pvalue > P_MIN


def test_seeded_draws_are_reproducible() -> None:
    a = noise.uniforms(6, np.random.default_rng(11))
    b = noise.uniforms(6, np.random.default_rng(11))
    c = noise.uniforms(6, np.random.default_rng(12))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_csprng_draws_differ() -> None:
    assert not np.array_equal(noise.uniforms(4), noise.uniforms(4))


def test_no_float_sampler_is_left_to_release_with() -> None:
    # every release is an exact lattice point (service.dp.noise.lattice); the inverse-CDF samplers
    # of earlier versions are gone from the service (issue 25 §2)
    for name in ("gaussian", "laplace", "gamma", "uniform_direction", "norm_exponential_vector"):
        assert not hasattr(noise, name), name


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
