"""Clipped per-example gradient sums in floating point, and the sensitivity they really have.

DP-SGD and the DP distributed Lasso release Σ_i ĝ_i + noise, ĝ_i = â_i·x_i a per-example
gradient a_i·x_i clipped to norm C. The proofs bound the change of the *exact* sum under
replace-one by 2C. What is computed is a double vector Ŝ = fl(Σ_i â_i x_i) (a BLAS
matrix–vector product, in whatever order and blocking the library chooses), and the row norms
used to clip are themselves rounded. This module clips so that the exact terms provably have
norm ≤ C, and bounds how far the computed sum (or mean) can be from the exact one, so the noise
can be calibrated to the sensitivity of the *computed* value:

    ‖Ŝ(D) − Ŝ(D′)‖ ≤ ‖Ŝ(D) − S(D)‖ + ‖S(D) − S(D′)‖ + ‖S(D′) − Ŝ(D′)‖ ≤ 2C + 2E(n).

Model: IEEE-754 binary64, round to nearest, u = 2⁻⁵³, η = 2⁻¹⁰⁷⁴ (the smallest subnormal).
Every operation returns op(a, b)(1 + δ) + ε with |δ| ≤ u, |ε| ≤ η/2, and ε = 0 for + and −
(a sum that underflows is exact); a fused multiply–add is one such operation.

1. Row norms (:func:`row_norm_bounds`). q̂_i = fl(Σ_j x_ij²) (numpy's ``einsum``, in whatever
   order it sums), then r_i = fl(fl(√fl(q̂_i + dη))·(1 + (d + 8)2⁻⁵²)). Each square is
   ≥ x²(1 − u) − η/2 and, in any order, each term passes through at most d − 1 additions of
   non-negative numbers, losing at most a factor (1 − u)^{d−1}, so
   q̂ ≥ (1 − u)^d‖x‖² − dη/2, i.e. ‖x‖² ≤ (q̂ + dη/2)/(1 − u)^d.
   The three roundings after q̂ cost at most (1 − u)^{5/2}, and
   (1 − u)^{5/2 + d/2}·(1 + (2d + 16)u) ≥ 1 + (1.5d + 13.5)u − O(d²u²) > 1 for d < 2⁵⁰, so
   r_i ≥ ‖x_i‖ (exactly, in real arithmetic). An infinite or zero row gives r_i = ∞ or r_i > 0.

2. The clip (:func:`clip_caps`, :func:`clip_coefficients`). cap_i = fl(C⁻/r_i) with C⁻ the
   double below C (0 if r_i = ∞), and â_i = copysign(fmin(|a_i|, cap_i), a_i) (±∞ gives
   ±cap_i, NaN gives ±cap_i too: fmin ignores a NaN). fl(C⁻/r) ≤ (C⁻/r)(1 + u) and
   C⁻(1 + u) < C (C⁻ ≤ C(1 − 2⁻⁵³)), so |â_i|·‖x_i‖ < C: each exact clipped term has norm
   < C whatever a_i is (clipped "to slightly less than C"), and â_i is a function of
   (a_i, x_i) alone.

3. The sum (:func:`sum_error_bound`). For each coordinate j, in *any* evaluation order (a tree
   of n − 1 additions, with or without FMA), |Ŝ_j − Σ_i â_i x_ij| ≤ γ_n Σ_i |â_i x_ij| + nη
   (γ_n = nu/(1 − nu): each term passes through at most n roundings; each of the ≤ n
   products or FMAs adds at most η/2, amplified by ≤ (1 + u)^n < 2). Over coordinates,
   ‖(Σ_i |â_i||x_ij|)_j‖ ≤ Σ_i |â_i|‖x_i‖ ≤ nC, so

       ‖Ŝ − S‖ ≤ E(n) = γ_n·n·C + √d·n·η.

   Because the bound holds for every order, it does not matter whether BLAS sums the two
   neighbouring datasets (or two runs) in the same order.

4. The mean (:func:`mean_sensitivity`, DP-SGD). ĉ = fl(Ŝ/n) per coordinate:
   |ĉ_j − Ŝ_j/n| ≤ u|Ŝ_j|/n + η/2, so ‖ĉ − S/n‖ ≤ (E(n) + u(nC + E(n)))/n + √d·η/2 and

       Δ_mean(n) = 2C/n + 2[(E(n) + u(nC + E(n)))/n + √d·η/2].

   For the sum (:func:`sum_sensitivity`, the Lasso) Δ_sum(n) = 2C + 2E(n). Both are computed
   exactly (fractions) and rounded up to a double (:func:`round_up`).

Sizes: for n = 50, d = 106, C = 1 the relative margin Δ_mean/(2C/n) − 1 is ≈ 2.8·10⁻¹³; for a
Lasso site of n = 30 000 rows ≈ 1.0·10⁻⁷ (it grows like n²u).

Assumption (stated, not proved): an unchanged record's multiplier a_i and bound r_i are
deterministic functions of that record and of public values (the iterate): the same
operations on the same operands give the same doubles in both neighbouring runs. numpy's
elementwise operations satisfy this by construction; ``einsum`` (step 1) and the BLAS
matrix–vector product behind the margin a_i = l′(y_i·wᵀx_i) compute each row's result with an
operation sequence fixed by the shapes and the row's position, which replace-one leaves
unchanged. (The *bounds* above hold for every order; only the equality of an unchanged
record's clipped term in the two worlds rests on this.)
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Final

import numpy as np
from numpy.typing import NDArray

from service.dp.core.accounting import round_up

__all__ = [
    "UNIT_ROUNDOFF",
    "ceil_sqrt",
    "clip_caps",
    "clip_coefficients",
    "clipped_mean",
    "clipped_sum",
    "mean_sensitivity",
    "round_up",
    "row_norm_bounds",
    "scale_for",
    "sum_error_bound",
    "sum_sensitivity",
]

FloatArray = NDArray[np.float64]

UNIT_ROUNDOFF: Final[Fraction] = Fraction(1, 2**53)
_ETA: Final[Fraction] = Fraction(1, 2**1074)
#: n·C must stay far below the largest double (no overflow anywhere in the sum)
_MAX_TOTAL: Final[float] = 2.0**1000


def row_norm_bounds(X: FloatArray) -> FloatArray:
    """r_i ≥ ‖x_i‖ (real arithmetic) for every row, each from row i alone (step 1)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError("X must be a matrix")
    d = X.shape[1]
    with np.errstate(over="ignore", invalid="ignore"):
        q = np.einsum("ij,ij->i", X, X)  # any order of the d − 1 additions: step 1 holds
        bounds: FloatArray = np.sqrt(q + d * 2.0**-1074) * (1.0 + (d + 8) * 2.0**-52)
    return bounds


def clip_caps(bounds: FloatArray, clip: float) -> FloatArray:
    """cap_i = fl(C⁻/r_i), 0 where r_i = ∞ (step 2): |â|·‖x_i‖ < C for every |â| ≤ cap_i."""
    _check_clip(clip)
    below = math.nextafter(clip, 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        cap = below / bounds
    out: FloatArray = np.where(np.isfinite(cap), cap, 0.0)
    return out


def clip_coefficients(a: FloatArray, caps: FloatArray) -> FloatArray:
    """â_i = copysign(fmin(|a_i|, cap_i), a_i): a multiplier of magnitude at most cap_i,
    whatever a_i is (±∞ and NaN included), equal to a_i when |a_i| ≤ cap_i (step 2)."""
    out: FloatArray = np.copysign(np.fmin(np.abs(a), caps), a)
    return out


def clipped_sum(a: FloatArray, X: FloatArray, caps: FloatArray) -> FloatArray:
    """Ŝ = fl(Σ_i â_i x_i): within :func:`sum_error_bound` of the exact clipped sum."""
    out: FloatArray = clip_coefficients(a, caps) @ X
    return out


def clipped_mean(a: FloatArray, X: FloatArray, caps: FloatArray) -> FloatArray:
    """ĉ = fl(Ŝ/n): within the per-dataset term of :func:`mean_sensitivity` of S/n."""
    out: FloatArray = clipped_sum(a, X, caps) / X.shape[0]
    return out


def _check_clip(clip: float) -> None:
    if not math.isfinite(clip) or clip <= 0.0:
        raise ValueError(f"the clip bound must be a finite positive number, got {clip!r}")


def ceil_sqrt(d: int) -> int:
    """⌈√d⌉ for an integer d ≥ 0, exactly (integer square root)."""
    root = math.isqrt(d)
    return root if root * root == d else root + 1


def sum_error_bound(n: int, d: int, clip: float) -> Fraction:
    """E(n) = γ_n·n·C + √d·n·η ≥ ‖Ŝ − S‖ (step 3), exactly (√d rounded up)."""
    _check_clip(clip)
    if n < 1 or d < 1:
        raise ValueError("n and d must be at least 1")
    if n * clip > _MAX_TOTAL or n >= 2**50:
        raise ValueError("n·C is too large for a floating-point bound")
    nu = n * UNIT_ROUNDOFF
    gamma = nu / (1 - nu)
    return gamma * n * Fraction(clip) + ceil_sqrt(d) * n * _ETA


def sum_sensitivity(n: int, d: int, clip: float) -> Fraction:
    """Δ_sum(n) = 2C + 2E(n): the L2 sensitivity of the computed clipped sum of n rows."""
    return 2 * Fraction(clip) + 2 * sum_error_bound(n, d, clip)


def mean_sensitivity(n: int, d: int, clip: float) -> Fraction:
    """Δ_mean(n) = 2C/n + 2[(E + u(nC + E))/n + √d·η/2]: that of the computed mean (step 4)."""
    error = sum_error_bound(n, d, clip)
    c = Fraction(clip)
    per_dataset = (error + UNIT_ROUNDOFF * (n * c + error)) / n + ceil_sqrt(d) * _ETA / 2
    return 2 * c / n + 2 * per_dataset


def scale_for(epsilon: float, sensitivity: Fraction) -> float:
    """The largest double β with β·Δ ≤ ε exactly (ε-DP noise ∝ exp(−β‖z‖) for sensitivity Δ)."""
    beta = epsilon / round_up(sensitivity)
    while beta > 0.0 and Fraction(beta) * sensitivity > Fraction(epsilon):
        beta = math.nextafter(beta, 0.0)
    while Fraction(math.nextafter(beta, math.inf)) * sensitivity <= Fraction(epsilon):
        beta = math.nextafter(beta, math.inf)
    return beta
