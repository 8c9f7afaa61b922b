"""A high-precision oracle for the Canonne–Kamath–Steinke conversion of ρ-zCDP to (ε, δ)-DP.

ε(ρ, δ) = inf_{α>1} αρ + (ln(1/δ) + (α − 1) ln(1 − 1/α) − ln α)/(α − 1) (CKS 2020, Cor. 13),
found by golden-section search over α = 1 + eᵗ (the expression is unimodal in t) in mpmath's
working precision, independently of service.dp's doubles.
"""

from __future__ import annotations

import math
from typing import Any

import mpmath as mp  # type: ignore[import-untyped]


def cks_infimum(rho: Any, delta: float) -> Any:
    """inf over α = 1 + eᵗ of the CKS ε, golden-section search in the working precision."""
    r, log_inv = mp.mpf(rho), -mp.log(mp.mpf(delta))

    def eps_at(t: Any) -> Any:
        am1 = mp.exp(t)
        return (1 + am1) * r + (log_inv + am1 * mp.log(am1 / (1 + am1)) - mp.log(1 + am1)) / am1

    centre = 0.5 * math.log(float(log_inv) / float(rho))
    lo, hi, ratio = mp.mpf(centre - 20), mp.mpf(centre + 20), (mp.sqrt(5) - 1) / 2
    for _ in range(250):
        left, right = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if eps_at(left) < eps_at(right):
            hi = right
        else:
            lo = left
    return eps_at((lo + hi) / 2)
