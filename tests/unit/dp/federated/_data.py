"""Synthetic sites for the federated protocol tests (rows in the unit ball, labels ±1)."""

from __future__ import annotations

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
