"""Combining site models into one (multi-site methods, DESIGN §3). Pure numerics.

Average method (seed 000, Alg. 4): given N linear classifiers f_1, …, f_N over the same
encoded features, release

    f̄ = Σ_i π_i f_i,    π_i = w_i / Σ_j w_j,

with public, non-negative weights w (all equal by default: f̄ = (1/N) Σ_i f_i, the thesis's
"treats the importance of each local site equally").

Privacy: f̄ is a function of the released f_i and of public weights only. It touches no data,
so by post-processing it is (ε_i, δ_i)-DP for site i's dataset whenever f_i was; sites hold
disjoint datasets, so the guarantees compose in parallel (each dataset keeps its own). When any
f_i has no guarantee, f̄ has none for that site's data. Nothing new is spent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from service.dp.noise import round_to_grid

__all__ = ["average_coefficients", "normalised_weights"]

FloatArray = NDArray[np.float64]


def normalised_weights(n_models: int, weights: Sequence[float] | None = None) -> FloatArray:
    """π = w / Σw for public weights ``w`` (one per model); equal weights when ``None``.

    Raises ``ValueError`` for a count mismatch, a negative or non-finite weight, or weights
    that sum to zero.
    """
    if n_models < 1:
        raise ValueError("averaging needs at least one model")
    if weights is None:
        return np.full(n_models, 1.0 / n_models)
    if len(weights) != n_models:
        raise ValueError(f"expected {n_models} weights (one per model), got {len(weights)}")
    w = np.asarray([float(v) for v in weights], dtype=np.float64)
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and non-negative")
    total = float(w.sum())
    if not total > 0 or not math.isfinite(total):
        raise ValueError("weights must not all be zero")
    normalised: FloatArray = w / total
    return normalised


def average_coefficients(
    coefficients: Sequence[ArrayLike], weights: Sequence[float] | None = None
) -> FloatArray:
    """The weighted average Σ π_i f_i of equally long coefficient vectors (module doc),
    rounded to the release grid.

    Raises ``ValueError`` when there are no models, the vectors differ in length or hold
    non-finite values, or the weights are invalid (:func:`normalised_weights`).
    """
    if not coefficients:
        raise ValueError("averaging needs at least one model")
    rows = [np.asarray(c, dtype=np.float64).reshape(-1) for c in coefficients]
    d = rows[0].size
    if d == 0 or any(r.size != d for r in rows):
        raise ValueError("every model must have the same, non-zero number of coefficients")
    M = np.vstack(rows)
    if not np.all(np.isfinite(M)):
        raise ValueError("coefficients must be finite")
    pi = normalised_weights(len(rows), weights)
    averaged: FloatArray = round_to_grid(pi @ M)
    return averaged
