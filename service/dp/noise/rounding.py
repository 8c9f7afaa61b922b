"""IEEE-754 double rounding constants shared by the proved error bounds.

u = 2⁻⁵³ (round to nearest), γ_k = ku/(1 − ku) (Higham: the relative error of k operations),
an upper bound on a computed ℓ₂ norm, and compensated sums with their bound. Used by
:mod:`service.dp.noise.lattice`, :mod:`service.dp.optimize.certified` and the solver's
:class:`~service.dp.optimize.solvers.FinalPass`.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = ["KAPPA", "UNIT_ROUNDOFF", "compensated_row_sums", "gamma", "norm_up"]

#: u, the unit roundoff of binary64 with round to nearest
UNIT_ROUNDOFF: Final[float] = 2.0**-53
#: multiplies first-order bounds: covers second-order terms and the bounds' own roundings
KAPPA: Final[float] = 1.0 + 2.0**-20


def gamma(k: int | float) -> float:
    """γ_k = ku/(1 − ku), taken up by κ so that its own evaluation cannot round it below."""
    return k * UNIT_ROUNDOFF / (1.0 - k * UNIT_ROUNDOFF) * KAPPA


def norm_up(v: NDArray[np.float64]) -> float:
    """An upper bound on ‖v‖₂: the computed Σv_i² is within γ_d of the true one (d squares and
    d − 1 additions), √ halves that and adds u, the final product one more u; (d + 8)u covers
    all of them for d ≪ 1/u."""
    return float(np.sqrt(np.dot(v, v))) * (1.0 + (v.size + 8) * UNIT_ROUNDOFF)


def compensated_row_sums(
    terms: NDArray[np.float64],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Row sums of a (count, d) array with a bound on each sum's error: ``math.fsum`` per row
    for few rows (correctly rounded; 2u·|sum| allows even a faithful rounding), else the
    compensated Sum2 of Ogita, Rump & Oishi (2005, Prop. 4.5; error-free TwoSum, exact in IEEE
    arithmetic), error ≤ u·|sum| + γ²_{d−1}·Σ|terms|, vectorised over the rows."""
    count, d = terms.shape
    absolute = np.abs(terms).sum(axis=1) * (1.0 + 2.0**-16)  # ≥ Σ|terms| for d < 2³⁶
    if count <= 32:
        sums = np.array([math.fsum(row) for row in terms.tolist()], dtype=np.float64)
        return sums, (2.0 * UNIT_ROUNDOFF) * np.abs(sums) * KAPPA
    acc = terms[:, 0].copy()
    carry = np.zeros(count)
    for j in range(1, d):
        b = terms[:, j]
        x = acc + b
        z = x - acc
        carry += (acc - (x - z)) + (b - z)  # TwoSum's exact error term
        acc = x
    sums = acc + carry
    g = (d - 1) * UNIT_ROUNDOFF / (1.0 - (d - 1) * UNIT_ROUNDOFF)
    return sums, (UNIT_ROUNDOFF * np.abs(sums) + g * g * absolute) * KAPPA
