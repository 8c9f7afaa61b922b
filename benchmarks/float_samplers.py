"""The float samplers of PrivFit's earlier versions, kept only as the baseline that
``bench_float_safe`` times the exact lattice samplers against. Nothing in ``service`` uses them:
a value drawn by inverse CDF in doubles is not an exact release (docs/privacy.md, "Floating
point"), so every release goes through :mod:`service.dp.noise.lattice`."""

from __future__ import annotations

import os

import numpy as np
from numpy.typing import NDArray
from scipy import special

from service.dp.noise.draws import uniforms

__all__ = [
    "full_precision_uniforms",
    "gamma",
    "gaussian",
    "gaussian_vector",
    "laplace",
    "norm_exponential_vector",
    "uniform_direction",
]


def gaussian(
    size: int | tuple[int, ...], *, sigma: float = 1.0, rng: np.random.Generator | None = None
) -> NDArray[np.float64]:
    """N(0, σ²) draws by inverse CDF: σ·Φ⁻¹(U)."""
    _check_scale("sigma", sigma)
    return sigma * special.ndtri(uniforms(size, rng))


def gaussian_vector(
    d: int, *, sigma: float, rng: np.random.Generator | None = None
) -> NDArray[np.float64]:
    """One draw of N(0, σ² I_d)."""
    return gaussian(d, sigma=sigma, rng=rng)


def laplace(
    size: int | tuple[int, ...], *, scale: float, rng: np.random.Generator | None = None
) -> NDArray[np.float64]:
    """Laplace(0, b) draws by inverse CDF: −b·sign(U − ½)·ln(1 − 2|U − ½|)."""
    _check_scale("scale", scale)
    v = uniforms(size, rng) - 0.5
    return -scale * np.sign(v) * np.log1p(-2.0 * np.abs(v))


def gamma(
    size: int | tuple[int, ...],
    *,
    shape: float,
    scale: float,
    rng: np.random.Generator | None = None,
) -> NDArray[np.float64]:
    """Gamma(shape k, scale θ) draws by inverse CDF: θ·P⁻¹(k, U) (regularised incomplete gamma)."""
    _check_scale("shape", shape)
    _check_scale("scale", scale)
    draws = np.asarray(special.gammaincinv(shape, uniforms(size, rng)), dtype=np.float64)
    return scale * draws


def uniform_direction(d: int, *, rng: np.random.Generator | None = None) -> NDArray[np.float64]:
    """A point uniform on the unit sphere S^{d−1}: a standard Gaussian vector normalised."""
    if d < 1:
        raise ValueError(f"dimension must be at least 1, got {d}")
    while True:
        g = gaussian(d, rng=rng)
        norm = float(np.linalg.norm(g))
        if norm > 0.0:
            return g / norm


def full_precision_uniforms(
    size: int, rng: np.random.Generator | None = None
) -> NDArray[np.float64]:
    """Uniforms on (0, 1) at the full resolution of float64 near 0.

    U = (2⁵² + m)·2^{−53−e} with e ~ Geometric(½) (P[e = j] = 2^{−j−1}: the count of trailing
    zero bits of random 64-bit words) and m a uniform 52-bit mantissa: U falls in the binade
    [2^{−e−1}, 2^{−e}) with that binade's probability, uniformly on its doubles. Unlike
    (k + ½)·2⁻⁵², small values are as finely resolved as doubles allow, so −ln U has a
    relative resolution of 2⁻⁵² all the way into the tail instead of the sparse top values
    θ·ln(2⁵²/j). An exponent above 1020 (probability 2^{−1021}) is set to 0 to stay normal.
    """
    if size < 0:
        raise ValueError("size must be ≥ 0")
    exponent = np.zeros(size, dtype=np.int64)
    pending = np.arange(size)
    while pending.size:  # a word of 64 zero bits (probability 2^-64) adds 64 and draws again
        words = _words64(pending.size, rng)
        zero = words == 0
        low = words & (~words + np.uint64(1))  # the lowest set bit (0 for a zero word)
        trailing = np.log2(np.where(zero, 1, low).astype(np.float64)).astype(np.int64)
        exponent[pending] += np.where(zero, 64, trailing)
        pending = pending[zero]
    capped = exponent > 1020
    if np.any(capped):  # pragma: no cover - probability 2^-1021 per draw
        exponent[capped] = 0
    mantissa = (_words64(size, rng) >> np.uint64(12)).astype(np.float64)  # exact: < 2^52
    out: NDArray[np.float64] = np.ldexp(2.0**52 + mantissa, -53 - exponent)
    return out


def _words64(count: int, rng: np.random.Generator | None) -> NDArray[np.uint64]:
    if rng is None:
        return np.frombuffer(os.urandom(8 * count), dtype=np.uint64).copy()
    return rng.integers(0, 2**64, size=count, dtype=np.uint64)


def norm_exponential_vector(
    d: int, *, beta: float, rng: np.random.Generator | None = None
) -> NDArray[np.float64]:
    """One draw b ∈ R^d from the density ν(b) ∝ exp(−β‖b‖), for noise inside an objective.

    In polar form the density of r = ‖b‖ is ∝ r^{d−1} e^{−βr}, i.e. Gamma(shape d, scale 1/β),
    independent of the direction, which is uniform on the sphere. E‖b‖ = d/β.

    The norm is drawn at full floating resolution as a sum of d exponentials,
    r = Σ_{i≤d} (−ln U_i)/β with :func:`full_precision_uniforms` (Gamma(d, 1/β) for integer d),
    so the achievable norms are dense in the tail (relative spacing ~2⁻⁵²) rather than the
    sparse θ·P⁻¹(d, 1 − j·2⁻⁵²) of a 52-bit inverse CDF (issue 19 §1). What this does and does
    not prove is stated in docs/privacy.md ("Floating point"): vectors *released* with noise
    use :mod:`service.dp.noise.lattice`, which is exact; noise that enters an objective keeps the
    continuous proof, realised to double precision, without a proof for the doubles.
    """
    _check_scale("beta", beta)
    if d < 1:
        raise ValueError(f"dimension must be at least 1, got {d}")
    exponentials = -np.log(full_precision_uniforms(d, rng))
    r = float(np.sum(exponentials)) / beta
    return r * uniform_direction(d, rng=rng)


def _check_scale(name: str, value: float) -> None:
    if not np.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")
