"""IEEE-754 double rounding constants shared by the proved error bounds.

u = 2⁻⁵³ (round to nearest), γ_k = ku/(1 − ku) (Higham: the relative error of k operations),
and an upper bound on a computed ℓ₂ norm. Used by :mod:`service.dp.certified` and the solver's
:class:`~service.dp.solvers.FinalPass`.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = ["KAPPA", "UNIT_ROUNDOFF", "gamma", "norm_up"]

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
