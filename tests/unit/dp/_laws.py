"""Shared KS checks of the norm-exponential noise law, each with its wrong-scale control.

Noise b ∈ ℝᴰ with density ∝ exp(−β‖b‖) has ‖b‖ ~ Gamma(D, 1/β) and a direction uniform on the
sphere, so the first coordinate of b/‖b‖, mapped to (u + 1)/2, is Beta((D − 1)/2, (D − 1)/2).
Each check also asserts that the same sample rejects half and twice the scale: the test has the
power to see a factor of two in the noise.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy import stats

FloatArray = NDArray[np.float64]
P_MIN = 1e-4


def gamma_norms_fit_only_at_the_right_scale(
    norms: FloatArray | list[float], dim: int, beta: float
) -> None:
    """KS of the norms against Gamma(D, 1/β); half and twice the scale are rejected."""
    assert stats.kstest(norms, stats.gamma(dim, scale=1.0 / beta).cdf).pvalue > P_MIN
    for wrong in (0.5, 2.0):
        assert stats.kstest(norms, stats.gamma(dim, scale=wrong / beta).cdf).pvalue < P_MIN


def norm_exponential_fits_only_at_the_right_scale(noise: FloatArray, beta: float) -> None:
    """The rows of ``noise`` (runs × D): Gamma(D, 1/β) norms at that scale only, and a
    uniform direction (first coordinate's Beta law)."""
    dim = noise.shape[1]
    norms = np.linalg.norm(noise, axis=1)
    gamma_norms_fit_only_at_the_right_scale(norms, dim, beta)
    half = (dim - 1) / 2.0
    u1 = noise[:, 0] / norms
    assert stats.kstest((u1 + 1.0) / 2.0, stats.beta(half, half).cdf).pvalue > P_MIN
