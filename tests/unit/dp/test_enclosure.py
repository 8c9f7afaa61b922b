"""Noise enclosures (service.dp.noise.lattice): the doubles and radius enclose the real noise vector
the uniforms define (checked against the decimal path on the same uniforms), the decimal
fallback agrees with the fast path, and the laws are the hand-derived ones."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest
from scipy import stats

from service.dp.noise import lattice as L
from service.dp.noise.lattice import enclosure, exact
from service.dp.noise.lattice.fast import _Block


def _distance(value: np.ndarray, unit: float, intervals: list[tuple[Decimal, Decimal]]) -> float:
    """The largest ℓ₂ distance from ``value`` to a point of the box of decimal intervals (in
    units of ``unit``), in decimal arithmetic."""
    total = Decimal(0)
    for v, (lo, hi) in zip(value.tolist(), intervals, strict=True):
        x = Decimal(v) / Decimal(unit)
        far = max(abs(x - lo), abs(hi - x))
        total += far * far
    return float(total.sqrt()) * unit


@pytest.mark.parametrize(
    ("d", "beta"), [(1, 0.5), (3, 0.1), (20, 3.0), (106, 0.05), (106, 1e-6), (5, 1e6)]
)
def test_norm_exponential_enclosure_holds_the_real_vector(d: int, beta: float) -> None:
    for seed in range(3):
        got = L.norm_exponential_enclosure(d, beta=beta, rng=np.random.default_rng(seed))
        # the same uniforms (same seed, same order of draws) on the decimal path
        unit = enclosure._unit_near(d / beta)
        block = L.NormExponentialBlock(
            1, d, beta=beta * unit * 2.0**L.GRID_EXPONENT, rng=np.random.default_rng(seed)
        )
        pairs = block._pair_uniforms(0)
        radial = exact._Uniform.many(block._radial[0])
        evaluate = exact._norm_exponential_evaluator(pairs, radial, d, block.beta)
        boxes = enclosure._decimal_intervals(
            block._bits, [u for p in pairs for u in p] + radial, evaluate
        )
        assert _distance(got.value, unit, boxes) <= got.radius
        # and the radius is tight: relative 10⁻¹² of the noise
        assert got.radius <= 1e-12 * float(np.linalg.norm(got.value))


@pytest.mark.parametrize(("d", "sigma"), [(1, 1.0), (7, 3e-5), (106, 1e4)])
def test_gaussian_enclosure_holds_the_real_vector(d: int, sigma: float) -> None:
    for seed in range(3):
        got = L.gaussian_enclosure(d, sigma=sigma, rng=np.random.default_rng(seed))
        unit = enclosure._unit_near(sigma)
        block = L.GaussianBlock(1, d, sigma=sigma / unit * L.GRID, rng=np.random.default_rng(seed))
        pairs = block._pair_uniforms(0)
        evaluate = exact._gaussian_evaluator(pairs, 2 * len(pairs), block.sigma)
        boxes = enclosure._decimal_intervals(block._bits, [u for p in pairs for u in p], evaluate)
        assert _distance(got.value, unit, boxes[:d]) <= got.radius
        assert got.radius <= 1e-12 * sigma * math.sqrt(d)


def test_the_decimal_fallback_agrees_with_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Coordinates the fast path leaves open are enclosed by the decimal path; forcing every
    coordinate there gives a value within both radii of the fast one."""
    fast = L.norm_exponential_enclosure(9, beta=0.7, rng=np.random.default_rng(11))
    gauss_fast = L.gaussian_enclosure(5, sigma=2.0, rng=np.random.default_rng(12))
    original = enclosure._enclose

    def all_open(block: _Block, unit: float, intervals):  # type: ignore[no-untyped-def]
        block._err[0, :] = np.inf
        return original(block, unit, intervals)

    monkeypatch.setattr(enclosure, "_enclose", all_open)
    slow = L.norm_exponential_enclosure(9, beta=0.7, rng=np.random.default_rng(11))
    assert float(np.linalg.norm(slow.value - fast.value)) <= slow.radius + fast.radius
    assert slow.radius <= 1e-15 * float(np.linalg.norm(slow.value))
    gauss_slow = L.gaussian_enclosure(5, sigma=2.0, rng=np.random.default_rng(12))
    assert float(np.linalg.norm(gauss_slow.value - gauss_fast.value)) <= (
        gauss_slow.radius + gauss_fast.radius
    )


@pytest.mark.statistical
def test_enclosure_laws_are_the_hand_derived_ones() -> None:
    """‖X‖ ~ Gamma(d, 1/β) for the norm-exponential law (d = 4, β = 2.5: scale 0.4) and
    X_i ~ N(0, σ²) for the Gaussian (σ = 3); each test rejects half and twice the scale."""
    rng = np.random.default_rng(13)
    norms = np.array(
        [
            np.linalg.norm(L.norm_exponential_enclosure(4, beta=2.5, rng=rng).value)
            for _ in range(2000)
        ]
    )
    assert stats.kstest(norms, stats.gamma(4, scale=0.4).cdf).pvalue > 1e-4
    for wrong in (0.5, 2.0):
        assert stats.kstest(norms, stats.gamma(4, scale=0.4 * wrong).cdf).pvalue < 1e-4
    coords = np.concatenate(
        [L.gaussian_enclosure(3, sigma=3.0, rng=rng).value for _ in range(1000)]
    )
    assert stats.kstest(coords, stats.norm(scale=3.0).cdf).pvalue > 1e-4
    for wrong in (0.5, 2.0):
        assert stats.kstest(coords, stats.norm(scale=3.0 * wrong).cdf).pvalue < 1e-4
