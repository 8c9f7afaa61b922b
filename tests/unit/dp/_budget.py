"""The objective's share ε₁ of a certified objective-perturbation budget, derived by hand.

Objective perturbation and its relatives (``objective_perturbation``,
``generalized_objective_perturbation``, ``gaussian_objective_perturbation``, hypothesis
transfer and the stacking levels built on ``objective_perturbation``) release the certified
minimiser of :mod:`service.dp.optimize.certified`: the perturbed objective runs at ε₁ and a small
release noise, which covers the certified distance between the solver's answer and the exact
minimiser, runs at ε_r, with ε₁ + ε_r ≤ ε (adaptive composition).

The split (``service.dp.optimize.certified.split``, ``split_epsilon``, ``release_share``,
``base_tolerance``). With u = 2⁻⁵³ the part of the certificate's tolerance that depends on
n and d only is

    τ₀ = 10⁻¹⁰ + 8·(min(n, 4096) + d)·u,

(4096 rows per block of the certified gradient sum, whose rounding bound is γ₄₀₉₆ however
many rows there are),

and the expected coefficient shift ≈ A/ε₁ + B·τ/ε_r is smallest at ε_r/ε₁ = √(nτ), so the
release takes the share

    κ = min(½, √(nτ₀)/(1 + √(nτ₀))),   ε_r = fl(ε·κ),   ε₁ = fl(ε − ε_r),

with ε₁ stepped down one ulp at a time while ε₁ + ε_r > ε in exact (rational) arithmetic.
For n = 1000, d = 4: 8·1004·u = 8.9173113e-13, τ₀ = 1.0089173113e-10,
√(nτ₀) = 3.1763458743e-4, κ = 3.1753372774e-4, so at ε = 1: ε_r = 3.175337277e-4 and
ε₁ = 0.9996824662723. (κ grows with n, as the certificate's rounding error does: at n = 10⁷,
d = 10 it is 0.2305895, and it is capped at ½ from n ≈ 3.4·10⁷.)

This is an independent transcription of that formula for the tests' hand-derived expected
values; it never calls the service.
"""

from __future__ import annotations

import math
from fractions import Fraction

__all__ = ["objective_budget", "release_budget"]

#: the unit roundoff of IEEE double precision
_U = 2.0**-53


def _release_and_objective(epsilon: float, n: int, d: int) -> tuple[float, float]:
    tau0 = 1e-10 + 8.0 * (min(n, 4096) + d) * _U
    root = math.sqrt(n * tau0)
    kappa = min(0.5, root / (1.0 + root))
    release = epsilon * kappa
    objective = epsilon - release
    while Fraction(objective) + Fraction(release) > Fraction(epsilon):
        objective = math.nextafter(objective, 0.0)
    return release, objective


def objective_budget(epsilon: float, n: int, d: int) -> float:
    """ε₁, the budget the perturbed objective is calibrated with (module docstring)."""
    return _release_and_objective(epsilon, n, d)[1]


def release_budget(epsilon: float, n: int, d: int) -> float:
    """ε_r = fl(ε·κ), the budget of the certified release noise (module docstring)."""
    return _release_and_objective(epsilon, n, d)[0]
