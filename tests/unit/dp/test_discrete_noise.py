"""Exact discrete samplers: each law by chi-square against its hand-derived mass function, on
the seeded and the CSPRNG path; exact Bernoulli probabilities; parameter rejection."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from service.dp.noise import discrete as dn

N = 6000
P_MIN = 1e-4
PATHS = pytest.mark.parametrize(
    "rng", [np.random.default_rng(20261125), None], ids=["seeded", "csprng"]
)


def _chi_square(draws: list[int], pmf: dict[int, float]) -> float:
    """p-value of a chi-square test of ``draws`` against ``pmf`` (tail cells pooled)."""
    support = sorted(x for x, p in pmf.items() if p * len(draws) >= 5)
    lo, hi = support[0], support[-1]
    cells = list(range(lo, hi + 1))
    observed = [sum(1 for v in draws if v == x) for x in cells]
    expected = [pmf[x] * len(draws) for x in cells]
    observed += [sum(1 for v in draws if v < lo or v > hi)]
    expected += [len(draws) - sum(expected)]
    return float(stats.chisquare(observed, expected).pvalue)


def _laplace_pmf(b: float, reach: int) -> dict[int, float]:
    # P[X = x] = (1 − e^{−1/b})/(1 + e^{−1/b}) e^{−|x|/b}: Σ_x e^{−|x|/b} = (1 + q)/(1 − q).
    q = math.exp(-1.0 / b)
    return {x: (1 - q) / (1 + q) * q ** abs(x) for x in range(-reach, reach + 1)}


def _gaussian_pmf(sigma2: float, reach: int) -> dict[int, float]:
    # P[X = x] = e^{−x²/2σ²}/Z, Z summed over |y| ≤ 60σ (the rest is below 1e-700).
    wide = int(60 * math.sqrt(sigma2)) + 10
    z = math.fsum(math.exp(-(y * y) / (2 * sigma2)) for y in range(-wide, wide + 1))
    return {x: math.exp(-(x * x) / (2 * sigma2)) / z for x in range(-reach, reach + 1)}


@pytest.mark.statistical
@PATHS
@pytest.mark.parametrize("scale", [0.7, 3.0, Fraction(25, 3)])
def test_discrete_laplace_law(rng: np.random.Generator | None, scale: float | Fraction) -> None:
    draws = [dn.discrete_laplace(scale, rng) for _ in range(N)]
    assert _chi_square(draws, _laplace_pmf(float(scale), 200)) > P_MIN
    assert abs(float(np.mean(draws))) < 6 * math.sqrt(2 * float(scale) ** 2 + 1) / math.sqrt(N)


@pytest.mark.statistical
@PATHS
@pytest.mark.parametrize("sigma2", [0.5, 4.0, 57.3])
def test_discrete_gaussian_law(rng: np.random.Generator | None, sigma2: float) -> None:
    draws = [dn.discrete_gaussian(sigma2, rng) for _ in range(N)]
    assert _chi_square(draws, _gaussian_pmf(sigma2, 200)) > P_MIN


@pytest.mark.statistical
@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(7, 2)])
def test_bernoulli_exp_probability(gamma: Fraction) -> None:
    rng = np.random.default_rng(7)
    n = 20000
    hits = sum(dn.bernoulli_exp(gamma, rng) for _ in range(n))
    p = math.exp(-float(gamma))
    assert stats.binomtest(hits, n, p).pvalue > P_MIN


def test_bernoulli_is_exact_at_the_ends_and_uses_the_denominator() -> None:
    rng = np.random.default_rng(1)
    assert not any(dn.bernoulli(Fraction(0), rng) for _ in range(200))
    assert all(dn.bernoulli(Fraction(1), rng) for _ in range(200))
    assert dn.bernoulli_exp(Fraction(0), rng)


def test_randbelow_is_uniform_beyond_one_chunk() -> None:
    rng = np.random.default_rng(3)
    n = 3 * 2**70 + 1
    draws = [dn.randbelow(n, rng) for _ in range(3000)]
    assert all(0 <= v < n for v in draws)
    # Top third vs the rest: a biased rejection step would skew this.
    top = sum(v >= 2 * (n // 3) for v in draws)
    assert stats.binomtest(top, len(draws), 1 / 3).pvalue > P_MIN
    assert dn.randbelow(1, rng) == 0
    assert 0 <= dn.randbelow(10) < 10


def test_vectors_have_the_requested_shape_and_integer_type() -> None:
    rng = np.random.default_rng(5)
    lap = dn.discrete_laplace_vector(7, scale=2.5, rng=rng)
    gau = dn.discrete_gaussian_vector(7, sigma2=9.0, rng=rng)
    assert lap.shape == gau.shape == (7,)
    assert lap.dtype == gau.dtype == np.int64


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan, True])
def test_bad_parameters_are_rejected(bad: float) -> None:
    with pytest.raises(ValueError):
        dn.discrete_laplace(bad)
    with pytest.raises(ValueError):
        dn.discrete_gaussian(bad)


def test_bad_probabilities_are_rejected() -> None:
    with pytest.raises(ValueError):
        dn.bernoulli(Fraction(3, 2))
    with pytest.raises(ValueError):
        dn.bernoulli_exp(Fraction(-1))
    with pytest.raises(ValueError):
        dn.randbelow(0)
