"""A private majority-class baseline: a noisy count of the positive labels (issue 28 item 4).

When a site has neither a public reference dataset nor a declared ``positive_fraction``, the
baseline a fit's expected accuracy is compared with (always answering the more frequent class)
is estimated from the private labels, for a small public slice of the fit's budget. Pure
numerics: no FastAPI or database import.

**The release.** With n rows (public) and c = #{i : yᵢ > 0}, release c̃ = c + Z, Z discrete
Laplace of scale b = 1/ε_b (P[Z = z] ∝ e^{−|z|/b};
:func:`service.dp.noise.discrete.discrete_laplace`: exact integer sampling, the scale taken as
the exact rational 1/ε_b).

**Guarantee: ε_b-DP under replace-one.** Replacing one row changes c by at most 1 (only that
row's own label enters c): sensitivity Δ = 1. For counts c, c′ with |c − c′| ≤ 1 and every
output x ∈ ℤ, P[c + Z = x]/P[c′ + Z = x] = e^{(|x − c′| − |x − c|)/b} ≤ e^{|c − c′|/b} ≤ e^{1/b}
= e^{ε_b}; so the count is (ε_b, 0)-DP. Everything below is post-processing of c̃ and the
public n.

**The estimate.** p̂ = clip(c̃/n, 0, 1) and the baseline m̂ = max(p̂, 1 − p̂). The noise's
variance is exactly Var Z = 2e^{−t}/(1 − e^{−t})², t = ε_b (the discrete Laplace of parameter t;
≈ 2/ε_b² for small ε_b), so sd(p̂) ≤ √Var Z / n before clipping (:func:`count_noise_sd`).

**The slice** (a function of public n and ε only, :func:`baseline_share`): ρ = √2/(n·ε·τ)
clamped to [:data:`MIN_SHARE`, :data:`MAX_SHARE`], τ = :data:`TARGET_SD`: the smallest share
whose continuous-Laplace approximation of sd(p̂), √2/(n·ρ·ε), is at most τ, never below 1 %
and never above 5 % of ε. The fit then runs at ε − ρε, and the two compose to ε (basic
sequential composition of the fit and the count).

**The warning.** A fit's expected accuracy ā is set against the baseline's upper confidence
bound m̂ + z·sd(p̂), z = :data:`WARNING_Z` (one-sided 95 % for the Gaussian approximation of
the noise): a fit is flagged unless it is expected to beat the majority class even if the
noisy count underestimated the baseline (:func:`warning_threshold`). A public baseline has
sd 0, and the comparison is then ā < m̂.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.dp.core.accounting import remainder_within
from service.dp.noise.discrete import discrete_laplace

__all__ = [
    "MAX_SHARE",
    "MIN_SHARE",
    "TARGET_SD",
    "WARNING_Z",
    "PrivateBaseline",
    "baseline_share",
    "count_noise_sd",
    "count_noise_variance",
    "private_majority",
    "reference_majority",
    "split_budget",
    "warning_threshold",
]

#: The target standard deviation τ of the estimated positive fraction.
TARGET_SD: Final[float] = 0.01
#: The slice ρ of ε spent on the count, at least and at most.
MIN_SHARE: Final[float] = 0.01
MAX_SHARE: Final[float] = 0.05
#: z of the one-sided bound the warning compares with (module docstring).
WARNING_Z: Final[float] = 1.645
#: The mechanism's name in records.
MECHANISM: Final[str] = "discrete_laplace_count"


def baseline_share(n: int, epsilon: float) -> float:
    """ρ = clamp(√2/(n·ε·τ), MIN_SHARE, MAX_SHARE) (module docstring); public inputs only."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError("n must be a positive integer")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("ε must be a finite number > 0")
    return min(MAX_SHARE, max(MIN_SHARE, math.sqrt(2.0) / (n * epsilon * TARGET_SD)))


def split_budget(n: int, epsilon: float) -> tuple[float, float]:
    """(ε_fit, ε_b): the fit's and the count's shares of ε, with ε_fit + ε_b ≤ ε in exact
    arithmetic (ε_fit is rounded down until the sum is; a check in doubles let the real sum
    exceed ε by an ulp, e.g. ε = 0.27 at n = 85 072)."""
    eps_b = baseline_share(n, epsilon) * epsilon
    return remainder_within(epsilon, eps_b), eps_b


def count_noise_variance(epsilon: float) -> float:
    """Var Z = 2e^{−ε}/(1 − e^{−ε})² of the discrete Laplace of scale 1/ε (1 − e^{−ε} by
    expm1, exact to the last digits for small ε)."""
    return 2.0 * math.exp(-epsilon) / math.expm1(-epsilon) ** 2


def count_noise_sd(n: int, epsilon: float) -> float:
    """sd of the unclipped fraction c̃/n: √Var Z / n."""
    return math.sqrt(count_noise_variance(epsilon)) / n


@dataclass(frozen=True, slots=True)
class PrivateBaseline:
    """The released count and what follows from it (all post-processing of c̃ and n)."""

    noisy_count: int
    n: int
    epsilon: float

    @property
    def positive_fraction(self) -> float:
        return min(1.0, max(0.0, self.noisy_count / self.n))

    @property
    def majority(self) -> float:
        p = self.positive_fraction
        return max(p, 1.0 - p)

    @property
    def sd(self) -> float:
        return count_noise_sd(self.n, self.epsilon)

    def record(self) -> dict[str, Any]:
        """What the job's record shows (the released count is the only data-dependent value)."""
        return {
            "mechanism": MECHANISM,
            "epsilon": self.epsilon,
            "delta": 0.0,
            "sensitivity": 1,
            "scale": 1.0 / self.epsilon,
            "noisy_positive_count": self.noisy_count,
            "n": self.n,
            "majority_baseline": self.majority,
            "sd": self.sd,
            "guarantee": "ε-DP under replace-one: the positive-label count has sensitivity 1",
        }


def private_majority(
    y: NDArray[np.float64], epsilon: float, rng: np.random.Generator | None
) -> PrivateBaseline:
    """Release c̃ = #{yᵢ > 0} + Z, Z discrete Laplace of scale exactly 1/ε (ε-DP, module
    docstring)."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("ε must be a finite number > 0")
    labels = np.asarray(y)
    n = int(labels.shape[0])
    if n < 1:
        raise ValueError("no rows")
    count = int(np.count_nonzero(labels > 0))
    scale = 1 / Fraction(epsilon)  # exact: e^{1/b} = e^{ε}
    return PrivateBaseline(count + discrete_laplace(scale, rng), n, float(epsilon))


def warning_threshold(baseline: float, sd: float) -> float:
    """The accuracy below which a fit is flagged: baseline + z·sd (module docstring)."""
    return baseline + WARNING_Z * sd


def reference_majority(majority: float) -> float:
    """A baseline as the synthetic reference task takes it: rounded to 2 decimals (so the
    simulations are cached across the noisy counts) and clipped to [0.5, 0.99] (post-processing
    of the released count)."""
    return min(0.99, max(0.5, round(float(majority), 2)))
