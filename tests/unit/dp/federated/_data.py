"""Synthetic sites for the federated protocol tests (rows in the unit ball, labels ±1)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
Sites = list[tuple[FloatArray, FloatArray]]


def make_sites(sizes: tuple[int, ...], d: int, seed: int) -> Sites:
    """One (X, y) per size; labels follow a noisy linear rule shared by every site."""
    rng = np.random.default_rng(seed)
    sites: Sites = []
    for n in sizes:
        X = rng.normal(size=(n, d))
        X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
        score = X[:, 0] - 0.5 * X[:, 1 % d] + 0.3 * rng.normal(size=n)
        y = np.where(score > 0, 1.0, -1.0)
        sites.append((X, y))
    return sites


def pooled(sites: Sites) -> tuple[FloatArray, FloatArray]:
    """The union of the sites' rows (what a centralised fit would see)."""
    return np.vstack([X for X, _ in sites]), np.concatenate([y for _, y in sites])


def hand_sum_sensitivity(n: int, d: int, clip: float) -> Fraction:
    """Δ = 2C + 2E(n), E(n) = γ_n·n·C + ⌈√d⌉·n·2⁻¹⁰⁷⁴, γ_n = nu/(1 − nu), u = 2⁻⁵³: the
    sensitivity of a clipped gradient sum of n rows as computed in doubles (written out
    independently of service.dp.data.clipping)."""
    u, eta = Fraction(1, 2**53), Fraction(1, 2**1074)
    root = math.isqrt(d) + (0 if math.isqrt(d) ** 2 == d else 1)
    gamma = n * u / (1 - n * u)
    return 2 * Fraction(clip) + 2 * (gamma * n * Fraction(clip) + root * n * eta)
