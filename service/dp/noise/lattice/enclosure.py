"""Enclosures: the real noise vector of a lattice law itself, as doubles with a proved error
bound, for computations into which noise enters rather than being added to a released value
(objective perturbation's certified release, :mod:`service.dp.optimize.certified`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from typing import Final, NamedTuple

import numpy as np

from service.dp.noise.lattice.exact import (
    GRID,
    GRID_EXPONENT,
    Evaluator,
    FloatArray,
    Interval,
    _Bits,
    _check_positive,
    _gaussian_evaluator,
    _norm_exponential_evaluator,
    _Sampler,
    _Undecided,
    _Uniform,
)
from service.dp.noise.lattice.fast import _U, GaussianBlock, NormExponentialBlock, _Block

__all__ = ["ENCLOSURE_RELATIVE", "Enclosure", "gaussian_enclosure", "norm_exponential_enclosure"]


# ---- enclosures: the real noise vector itself, as doubles with a proved error bound ----------


#: every fast-path coordinate of an enclosure is within this fraction of ‖ŷ‖/√d (the others
#: take the decimal path, 2⁻⁶⁰ relative), so its radius is at most 2⁻³⁹‖value‖
#: (:func:`service.dp.optimize.certified_failure.certificate_floor` relies on it)
ENCLOSURE_RELATIVE: Final[float] = 2.0**-40


class Enclosure(NamedTuple):
    """A real random vector X known as doubles: ‖X − value‖₂ ≤ radius (rigorously).

    Used where noise enters a computation instead of being added to a released value
    (objective perturbation, :mod:`service.dp.optimize.certified`): X is the real-valued noise
    of the continuous mechanism, a deterministic function of exact uniforms, and ``value`` its
    evaluation with the same proved error bounds as the fast path (:mod:`.fast`; the decimal path
    where those bounds are too loose, or above 2⁻⁴⁰‖value‖/√d): radius ≤ 2⁻³⁹‖value‖."""

    value: FloatArray
    radius: float


def _unit_near(scale: float) -> float:
    """The power of two nearest ``scale`` (a positive finite double)."""
    return math.ldexp(1.0, round(math.log2(scale)))


def _enclose(
    block: _Block, unit: float, intervals: Callable[[list[int]], list[Interval]]
) -> Enclosure:
    """Block 0's noise in units of ``unit`` (fast path), the coordinates the fast path left
    open from ``intervals`` (decimal), scaled back by the power of two ``unit`` (exact)."""
    y = block._y[0].copy()
    err = block._err[0].copy()
    known = np.isfinite(err)
    # a fast bound above ENCLOSURE_RELATIVE·‖ŷ‖/√d (rare: a tiny Gaussian norm or radial
    # sum) goes to the decimal path too, so that radius ≤ 2⁻³⁹‖value‖ always
    cap = ENCLOSURE_RELATIVE * math.sqrt(float(np.sum(y[known] ** 2)) / y.size)
    todo = [int(i) for i in np.flatnonzero(~known | (err > cap))]
    if todo:
        for i, (lo, hi) in zip(todo, intervals(todo), strict=True):
            mid = float((lo + hi) / 2)  # Decimal → double: correctly rounded
            gap = max(hi - Decimal(mid), Decimal(mid) - lo)  # exact (Decimal holds doubles)
            y[i] = mid
            err[i] = math.nextafter(float(gap), math.inf)
    radius = math.sqrt(math.fsum(float(e) * float(e) for e in err))
    # fsum is correctly rounded, √ ≤ ½ ulp; two ulps up cover both and the squares' roundings
    radius = math.nextafter(math.nextafter(radius * (1.0 + 4.0 * _U), math.inf), math.inf)
    return Enclosure(value=y * unit, radius=radius * unit)


def _decimal_intervals(
    bits: _Bits, uniforms: list[_Uniform], evaluate: Evaluator
) -> list[Interval]:
    """The evaluator's noise × scale intervals, refining the uniforms while undecided or
    wider than 2⁻⁶⁰ relative (either only happens with probability ~2⁻⁶⁰ per draw)."""
    sampler = _Sampler(bits, uniforms=uniforms)
    while True:
        ar = sampler.arith()
        try:
            noise, scale = evaluate(ar)
            out = [ar.mul_pos(x, scale) for x in noise]
            tight = Decimal(2) ** -60
            if all(hi - lo <= tight * (abs(hi) + abs(lo) + tight) for lo, hi in out):
                return out
        except _Undecided:
            pass
        sampler.refine_all()


def norm_exponential_enclosure(
    d: int, *, beta: float, rng: np.random.Generator | None = None
) -> Enclosure:
    """X ~ ν(x) ∝ exp(−β‖x‖) on ℝ^d, enclosed. X = unit·X′ with X′ ~ ν_{β·unit} for the power
    of two unit ≈ d/β, so X′ is of order one; X′ is block 0 of a :class:`NormExponentialBlock`
    whose grid-unit law is ν_{β·unit} (β_block = β·unit/γ, both factors powers of two)."""
    _check_positive("beta", beta)
    unit = _unit_near(d / beta)
    block = NormExponentialBlock(1, d, beta=beta * unit * 2.0**GRID_EXPONENT, rng=rng)

    def intervals(coords: list[int]) -> list[Interval]:
        pairs = block._pair_uniforms(0)
        radial = _Uniform.many(block._radial[0])
        evaluate = _norm_exponential_evaluator(pairs, radial, d, block.beta, coords)
        return _decimal_intervals(block._bits, [u for p in pairs for u in p] + radial, evaluate)

    return _enclose(block, unit, intervals)


def gaussian_enclosure(
    d: int, *, sigma: float, rng: np.random.Generator | None = None
) -> Enclosure:
    """X ~ N(0, σ²I_d), enclosed: X = unit·X′, X′ ~ N(0, (σ/unit)²) with unit ≈ σ a power of
    two, X′ the grid-unit noise of a :class:`GaussianBlock` with σ_block = (σ/unit)·γ."""
    _check_positive("sigma", sigma)
    unit = _unit_near(sigma)
    block = GaussianBlock(1, d, sigma=sigma / unit * GRID, rng=rng)

    def intervals(coords: list[int]) -> list[Interval]:
        pairs = block._pair_uniforms(0)
        evaluate = _gaussian_evaluator(pairs, 2 * len(pairs), block.sigma)
        everything = _decimal_intervals(block._bits, [u for p in pairs for u in p], evaluate)
        return [everything[i] for i in coords]

    return _enclose(block, unit, intervals)
