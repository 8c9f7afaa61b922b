"""Exact discrete Laplace and discrete Gaussian samplers (Canonne, Kamath & Steinke 2020).

Why: a continuous sampler evaluated in floating point (``scale · F⁻¹(U)`` with a 52-bit U)
reaches only a sparse, irregular set of doubles; the set reachable from one dataset and the set
reachable from its neighbour differ, and a released value in one but not the other identifies
the dataset (Mironov 2012). These samplers instead draw *integers* with exactly the stated law,
using only uniform random integers and exact rational arithmetic — no floating point at all —
so the privacy analysis of the discrete mechanisms holds for the bits produced.

Laws (hand-derived; the tests check them by chi-square):

* ``discrete_laplace(scale=b)``: P[X = x] = (1 − e^{−1/b}) / (1 + e^{−1/b}) · e^{−|x|/b}, x ∈ ℤ.
  Adding it to an integer-valued query of L1 sensitivity Δ gives (Δ/b)-DP: the ratio of the
  two probability mass functions at any x is e^{(|x−q'| − |x−q|)/b} ≤ e^{Δ/b}, and every
  integer has positive probability under both.
* ``discrete_gaussian(sigma2=σ²)``: P[X = x] = e^{−x²/(2σ²)} / Σ_{y∈ℤ} e^{−y²/(2σ²)}. Adding
  it to an integer-valued query of L2 sensitivity Δ gives ρ = Δ²/(2σ²) zCDP (CKS Thm 4).

Randomness: with ``rng=None`` uniform integers come from :func:`secrets.randbelow` (the OS
CSPRNG); with a numpy Generator (test mode) from ``rng.integers`` in exact 62-bit chunks.
"""

from __future__ import annotations

import math
import secrets
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "bernoulli",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_gaussian_vector",
    "discrete_laplace",
    "discrete_laplace_vector",
    "randbelow",
]

_CHUNK_BITS = 62


def randbelow(n: int, rng: np.random.Generator | None = None) -> int:
    """An exactly uniform integer in {0, …, n − 1} (n ≥ 1)."""
    if n < 1:
        raise ValueError("n must be a positive integer")
    if rng is None:
        return secrets.randbelow(n)
    if n <= 2**_CHUNK_BITS:
        return int(rng.integers(0, n))
    # Rejection from k uniform bits, k = bit length of n − 1: exactly uniform.
    k = (n - 1).bit_length()
    while True:
        value, bits = 0, 0
        while bits < k:
            take = min(_CHUNK_BITS, k - bits)
            value = (value << take) | int(rng.integers(0, 2**take))
            bits += take
        if value < n:
            return value


def bernoulli(p: Fraction, rng: np.random.Generator | None = None) -> bool:
    """True with probability exactly p ∈ [0, 1] (p rational): U < p·q for U uniform on [0, q)."""
    if not 0 <= p <= 1:
        raise ValueError("p must lie in [0, 1]")
    return randbelow(p.denominator, rng) < p.numerator


def bernoulli_exp(gamma: Fraction, rng: np.random.Generator | None = None) -> bool:
    """True with probability exactly e^{−γ} for rational γ ≥ 0 (CKS Algorithm 1).

    For γ ∈ [0, 1]: draw A_k ~ Bernoulli(γ/k) for k = 1, 2, … until the first A_K = 0; then
    P[K > k] = γᵏ/k!, so P[K odd] = Σ_k (−γ)ᵏ/k! = e^{−γ}. For γ > 1, e^{−γ} is the product of
    ⌊γ⌋ factors e^{−1} and one e^{−(γ − ⌊γ⌋)}, drawn independently.
    """
    if gamma < 0:
        raise ValueError("gamma must be ≥ 0")
    whole = math.floor(gamma)
    for _ in range(whole):
        if not _bernoulli_exp_unit(Fraction(1), rng):
            return False
    return _bernoulli_exp_unit(gamma - whole, rng)


def _bernoulli_exp_unit(gamma: Fraction, rng: np.random.Generator | None) -> bool:
    k = 1
    while bernoulli(gamma / k, rng):
        k += 1
    return k % 2 == 1


def _as_fraction(name: str, value: float | Fraction | int) -> Fraction:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite and > 0")
    out = Fraction(value)  # exact: a double's rational value
    if out <= 0:
        raise ValueError(f"{name} must be finite and > 0")
    return out


def discrete_laplace(scale: float | Fraction | int, rng: np.random.Generator | None = None) -> int:
    """X ∈ ℤ with P[X = x] ∝ e^{−|x|/b}, b = ``scale`` taken exactly (CKS Algorithm 2).

    With b = t/s: U uniform on {0..t−1} accepted with probability e^{−U/t}, V geometric with
    P[V = v] ∝ e^{−v}; X = U + tV then has P[X = x] ∝ e^{−x/t} on ℕ, and Y = ⌊X/s⌋ has
    P[Y = y] ∝ Σ_{x=ys}^{ys+s−1} e^{−x/t} ∝ e^{−y·s/t} = e^{−y/b}. A fair sign with the negative
    zero rejected makes the law symmetric on ℤ with zero counted once.
    """
    b = _as_fraction("scale", scale)
    t, s = b.numerator, b.denominator
    while True:
        u = randbelow(t, rng)
        if not bernoulli_exp(Fraction(u, t), rng):
            continue
        v = 0
        while bernoulli_exp(Fraction(1), rng):
            v += 1
        y = (u + t * v) // s
        negative = randbelow(2, rng) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_gaussian(
    sigma2: float | Fraction | int, rng: np.random.Generator | None = None
) -> int:
    """X ∈ ℤ with P[X = x] ∝ e^{−x²/(2σ²)}, σ² = ``sigma2`` taken exactly (CKS Algorithm 3).

    Proposal Y ~ discrete Laplace with integer scale τ = ⌊σ⌋ + 1, accepted with probability
    e^{−(|Y| − σ²/τ)²/(2σ²)}: the product e^{−|y|/τ}·e^{−(|y| − σ²/τ)²/(2σ²)} equals
    e^{−y²/(2σ²)} times a constant, so accepted values follow the discrete Gaussian exactly.
    """
    s2 = _as_fraction("sigma2", sigma2)
    tau = math.isqrt(s2.numerator // s2.denominator) + 1
    while True:
        y = discrete_laplace(tau, rng)
        excess = abs(y) - s2 / tau
        if bernoulli_exp(excess * excess / (2 * s2), rng):
            return y


def discrete_laplace_vector(
    d: int, *, scale: float | Fraction | int, rng: np.random.Generator | None = None
) -> NDArray[np.int64]:
    """d independent :func:`discrete_laplace` draws."""
    return np.array([discrete_laplace(scale, rng) for _ in range(d)], dtype=np.int64)


def discrete_gaussian_vector(
    d: int, *, sigma2: float | Fraction | int, rng: np.random.Generator | None = None
) -> NDArray[np.int64]:
    """d independent :func:`discrete_gaussian` draws."""
    return np.array([discrete_gaussian(sigma2, rng) for _ in range(d)], dtype=np.int64)
