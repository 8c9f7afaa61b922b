"""Private trivial-model baselines for multi-class and numeric labels (issue 29): a noisy class
histogram, and noisy sums of y and y², when a site has no public reference dataset. Pure
numerics: no FastAPI or database import. The binary form is :mod:`.baseline`.

Neighbours: one row *replaced* (n public and fixed), as everywhere in PrivFit.

**Multi-class: the histogram.** h_k = #{i : yᵢ = k}, k = 0 … K − 1. Replacing a row moves it
from its class k to a class k′: h_k falls by 1 and h_k′ rises by 1 (nothing moves when
k = k′), so ‖h − h′‖₁ ≤ 2 = Δ₁ whatever K is. Release h̃_k = h_k + Z_k, Z_k independent
discrete Laplace of scale b = Δ₁/ε_b = 2/ε_b (:func:`service.dp.noise.discrete.discrete_laplace`,
exact integer sampling, b taken as an exact rational). **Guarantee: ε_b-DP**: for any output,
Π_k e^{(|h̃_k − h′_k| − |h̃_k − h_k|)/b} ≤ e^{‖h − h′‖₁/b} ≤ e^{2/b} = e^{ε_b}.
Post-processing: the majority baseline m̂ = clip(max_k h̃_k / n, 1/K, 1) (always answering the
most frequent class; no class is rarer than 1/K at the top), and the proportions
p̂ = max(h̃, 0)/Σ max(h̃, 0) for the synthetic reference. Var Z_k = 2q/(1 − q)², q = e^{−1/b}
= e^{−ε_b/2} (≈ 2b² = 8/ε_b²), so sd(m̂) ≈ √Var Z / n, the sd of one noisy count (the max over
K cells is biased upwards, which only raises the threshold: the warning errs towards warning).

**Regression: the spread.** With y ∈ [−1, 1] (the label mapped from its public bounds),
S₁ = Σyᵢ (terms in [−1, 1]: Δ = 2) and S₂ = Σyᵢ² (terms in [0, 1]: Δ = 1), each released at
ε_b/2 by the exact grid release of :mod:`.evaluation_regression`: every term rounded onto the
grid g = 2⁻²⁰ and clipped to its range *before* summing (so the integer sum T has sensitivity
Δ/g for the bits computed, whatever the floating-point error), then (T + Z)·g with Z exact
discrete Laplace of scale (Δ/g)/(ε_b/2). Each release is (ε_b/2)-DP (ratio ≤ e^{|T − T′|/b});
**basic composition: ε_b-DP**. Post-processing: m₁ = clip(S̃₁/n, −1, 1),
m₂ = clip(S̃₂/n, m₁², 1), V̂ = m₂ − m₁², and the mean predictor's RMSE σ̂ = √V̂ (the label's
standard deviation, reported × (U − L)/2 in the label's units). Its sd by the delta method:
sd(V̂) = √(Var Z₂ + 4m₁² Var Z₁)·g/n, sd(σ̂) = min(sd(V̂)/(2σ̂), √sd(V̂)) (|√a − √b| ≤
√|a − b| caps it where σ̂ → 0).

**The slice** (public n and ε only, :func:`baseline_share`): ρ = clamp(C/(n·ε·τ), 1 %, 5 %)
with τ = :data:`~.baseline.TARGET_SD`, the smallest share whose continuous-Laplace sd of the
baseline is at most τ: C = 2√2 for the histogram (sd of one count at scale 2/(ρε):
√2·2/(nρε)); for the spread, with ε_b/2 per sum, sd(m₂) = √2·1/(n·ρε/2), sd(m₁) = √2·2/(n·ρε/2)
and sd(V̂) ≤ √(sd(m₂)² + 4·sd(m₁)²) (|m₁| ≤ 1) = √136/(nρε): C = √136. The fit runs at
ε − ρε; **basic sequential composition: ε** in all.

**The warning** (the fit's expected figure against the baseline's one-sided bound, z =
:data:`~.baseline.WARNING_Z`): accuracy below m̂ + z·sd, or RMSE above σ̂ − z·sd (both err
towards warning when the release is noisy; a public baseline has sd 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.dp.analysis.baseline import (
    MAX_SHARE,
    MIN_SHARE,
    TARGET_SD,
    WARNING_Z,
    count_noise_variance,
)
from service.dp.analysis.evaluation_regression import GRID_BITS
from service.dp.core.accounting import remainder_within
from service.dp.noise.discrete import discrete_laplace

__all__ = [
    "HISTOGRAM_SENSITIVITY",
    "SHARE_CONSTANTS",
    "SQUARE_SENSITIVITY",
    "SUM_SENSITIVITY",
    "PrivateHistogram",
    "PrivateSpread",
    "baseline_share",
    "class_histogram",
    "discrete_laplace_variance",
    "label_grid_sums",
    "private_histogram",
    "private_spread",
    "reference_proportions",
    "reference_spread",
    "rmse_warning_threshold",
    "split_budget",
]

#: Replace-one L1 sensitivity of the class histogram.
HISTOGRAM_SENSITIVITY: Final[int] = 2
#: Replace-one sensitivities of Σy (terms in [−1, 1]) and Σy² (terms in [0, 1]).
SUM_SENSITIVITY: Final[int] = 2
SQUARE_SENSITIVITY: Final[int] = 1
#: C of the share rule ρ = clamp(C/(n·ε·τ), 1 %, 5 %) per task (module docstring).
SHARE_CONSTANTS: Final[dict[str, float]] = {
    "multiclass": 2.0 * math.sqrt(2.0),
    "regression": math.sqrt(136.0),
}
#: The mechanisms' names in records.
HISTOGRAM_MECHANISM: Final[str] = "discrete_laplace_histogram"
SPREAD_MECHANISM: Final[str] = "discrete_laplace_grid_sums"
_UNITS: Final[int] = 2**GRID_BITS


def _check_epsilon(epsilon: float) -> None:
    if not (isinstance(epsilon, float | int) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("ε must be a finite number > 0")


def baseline_share(task: str, n: int, epsilon: float) -> float:
    """ρ = clamp(C_task/(n·ε·τ), MIN_SHARE, MAX_SHARE) (module docstring); public inputs."""
    if task not in SHARE_CONSTANTS:
        raise ValueError(f"no private baseline rule for task {task!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError("n must be a positive integer")
    _check_epsilon(epsilon)
    return min(MAX_SHARE, max(MIN_SHARE, SHARE_CONSTANTS[task] / (n * epsilon * TARGET_SD)))


def split_budget(task: str, n: int, epsilon: float) -> tuple[float, float]:
    """(ε_fit, ε_b) with ε_fit + ε_b ≤ ε in exact arithmetic (ε_fit rounded down until it is)."""
    eps_b = baseline_share(task, n, epsilon) * epsilon
    return remainder_within(epsilon, eps_b), eps_b


def discrete_laplace_variance(scale: float) -> float:
    """Var Z = 2q/(1 − q)², q = e^{−1/b}, of the discrete Laplace of scale b (the binary
    count's law at ε = 1/b: :func:`service.dp.analysis.baseline.count_noise_variance`)."""
    return count_noise_variance(1.0 / scale)


# ---- multi-class ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PrivateHistogram:
    """The released class counts and what follows from them (post-processing of h̃ and n)."""

    noisy_counts: tuple[int, ...]
    n: int
    epsilon: float

    @property
    def scale(self) -> float:
        return HISTOGRAM_SENSITIVITY / self.epsilon

    @property
    def majority(self) -> float:
        k = len(self.noisy_counts)
        return min(1.0, max(1.0 / k, max(self.noisy_counts) / self.n))

    @property
    def proportions(self) -> tuple[float, ...]:
        clipped = [max(0, c) for c in self.noisy_counts]
        total = sum(clipped)
        k = len(clipped)
        return tuple(c / total for c in clipped) if total > 0 else (1.0 / k,) * k

    @property
    def sd(self) -> float:
        return math.sqrt(discrete_laplace_variance(self.scale)) / self.n

    def record(self) -> dict[str, Any]:
        """What the model's record shows (the noisy counts are the only data-dependent values)."""
        return {
            "mechanism": HISTOGRAM_MECHANISM,
            "epsilon": self.epsilon,
            "delta": 0.0,
            "sensitivity": HISTOGRAM_SENSITIVITY,
            "scale": self.scale,
            "noisy_class_counts": list(self.noisy_counts),
            "n": self.n,
            "majority_baseline": self.majority,
            "sd": self.sd,
            "guarantee": "ε-DP under replace-one: the class histogram has L1 sensitivity 2",
        }


def class_histogram(y: NDArray[np.float64], n_classes: int) -> NDArray[np.int64]:
    """h_k = #{i : yᵢ = k} (the exact statistic; replace-one L1 sensitivity 2)."""
    labels = np.asarray(y, dtype=np.float64)
    if n_classes < 2 or not np.all((labels >= 0) & (labels < n_classes) & (labels % 1 == 0)):
        raise ValueError(f"y must hold class indices 0 to {n_classes - 1}")
    out: NDArray[np.int64] = np.bincount(labels.astype(np.int64), minlength=n_classes)
    return out


def private_histogram(
    y: NDArray[np.float64], n_classes: int, epsilon: float, rng: np.random.Generator | None
) -> PrivateHistogram:
    """Release h̃ = histogram of the class indices ``y`` + K discrete Laplace draws of scale
    exactly 2/ε (ε-DP, module docstring)."""
    _check_epsilon(epsilon)
    labels = np.asarray(y, dtype=np.float64)
    n = int(labels.shape[0])
    if n < 1:
        raise ValueError("no rows")
    counts = class_histogram(labels, n_classes)
    scale = Fraction(HISTOGRAM_SENSITIVITY) / Fraction(epsilon)  # exact: e^{2/b} = e^{ε}
    noisy = tuple(int(c) + discrete_laplace(scale, rng) for c in counts)
    return PrivateHistogram(noisy, n, float(epsilon))


# ---- regression ----------------------------------------------------------------------------


def _grid_terms(values: NDArray[np.float64], low: int, high: int) -> int:
    """Σ clip(round(v/g), low/g, high/g) as an exact integer (module docstring)."""
    scaled = np.clip(
        np.rint(np.asarray(values, dtype=np.float64) * _UNITS), low * _UNITS, high * _UNITS
    )
    return int(np.sum(scaled.astype(np.int64), dtype=np.int64))


def _grid_scale(sensitivity: int, epsilon: float) -> Fraction:
    """Scale of a sum's noise in grid units: (Δ/g)/ε, ε as its exact binary value."""
    return Fraction(sensitivity * _UNITS) / Fraction(epsilon)


@dataclass(frozen=True, slots=True)
class PrivateSpread:
    """The released Σy and Σy² (in [−1, 1] units) and what follows from them."""

    noisy_sum: float
    noisy_sum_squares: float
    n: int
    epsilon: float
    #: (U − L)/2: [−1, 1] units to the label's.
    half_range: float = 1.0

    @property
    def sum_epsilon(self) -> float:
        """ε of each of the two sums (the halves of ε_b)."""
        return self.epsilon / 2.0

    @property
    def mean(self) -> float:
        """m₁ = clip(S̃₁/n, −1, 1) ([−1, 1] units)."""
        return min(1.0, max(-1.0, self.noisy_sum / self.n))

    @property
    def variance(self) -> float:
        """V̂ = clip(S̃₂/n, m₁², 1) − m₁² ([−1, 1] units²)."""
        m1 = self.mean
        m2 = min(1.0, max(m1 * m1, self.noisy_sum_squares / self.n))
        return max(0.0, m2 - m1 * m1)

    @property
    def rmse(self) -> float:
        """The mean predictor's RMSE √V̂ in the label's units."""
        return math.sqrt(self.variance) * self.half_range

    @property
    def variance_sd(self) -> float:
        """sd(V̂) ≈ √(Var Z₂ + 4m₁² Var Z₁)·g/n ([−1, 1] units²)."""
        var1 = discrete_laplace_variance(float(_grid_scale(SUM_SENSITIVITY, self.sum_epsilon)))
        var2 = discrete_laplace_variance(float(_grid_scale(SQUARE_SENSITIVITY, self.sum_epsilon)))
        m1 = self.mean
        return math.sqrt(var2 + 4.0 * m1 * m1 * var1) / (_UNITS * self.n)

    @property
    def sd(self) -> float:
        """sd(σ̂) = min(sd(V̂)/(2σ̂), √sd(V̂)), in the label's units."""
        sd_v = self.variance_sd
        sigma = math.sqrt(self.variance)
        cap = math.sqrt(sd_v)
        out = cap if sigma == 0.0 else min(sd_v / (2.0 * sigma), cap)
        return out * self.half_range

    def record(self) -> dict[str, Any]:
        """What the model's record shows (the two noisy sums are the only data-dependent
        values)."""
        return {
            "mechanism": SPREAD_MECHANISM,
            "epsilon": self.epsilon,
            "delta": 0.0,
            "epsilon_per_sum": self.sum_epsilon,
            "grid": f"2^-{GRID_BITS}",
            "sensitivity": {"labels": SUM_SENSITIVITY, "squared_labels": SQUARE_SENSITIVITY},
            "scale": {
                "labels": SUM_SENSITIVITY / self.sum_epsilon,
                "squared_labels": SQUARE_SENSITIVITY / self.sum_epsilon,
            },
            "noisy_label_sum": self.noisy_sum,
            "noisy_squared_label_sum": self.noisy_sum_squares,
            "units": "the label mapped onto [-1, 1] from its public bounds",
            "n": self.n,
            "mean_baseline_rmse": self.rmse,
            "sd": self.sd,
            "guarantee": "ε-DP under replace-one: Σy (sensitivity 2) and Σy² (sensitivity 1) "
            "at ε/2 each, basic composition",
        }


def label_grid_sums(y: NDArray[np.float64]) -> tuple[int, int]:
    """(T₁, T₂): Σy and Σy² on the grid, in grid units (the exact statistics; replace-one
    sensitivities 2·2²⁰ and 1·2²⁰)."""
    labels = np.asarray(y, dtype=np.float64)
    return _grid_terms(labels, -1, 1), _grid_terms(labels * labels, 0, 1)


def private_spread(
    y: NDArray[np.float64],
    epsilon: float,
    rng: np.random.Generator | None,
    *,
    half_range: float = 1.0,
) -> PrivateSpread:
    """Release S̃₁ = Σy and S̃₂ = Σy² on the grid at ε/2 each (ε-DP, module docstring)."""
    _check_epsilon(epsilon)
    labels = np.asarray(y, dtype=np.float64)
    n = int(labels.shape[0])
    if n < 1:
        raise ValueError("no rows")
    if not np.all(np.isfinite(labels)):
        raise ValueError("labels must be finite")
    half = float(epsilon) / 2.0
    sum_terms, square_terms = label_grid_sums(labels)
    t1 = sum_terms + discrete_laplace(_grid_scale(SUM_SENSITIVITY, half), rng)
    t2 = square_terms + discrete_laplace(_grid_scale(SQUARE_SENSITIVITY, half), rng)
    return PrivateSpread(
        float(Fraction(t1, _UNITS)),
        float(Fraction(t2, _UNITS)),
        n,
        float(epsilon),
        float(half_range),
    )


# ---- the warning and the synthetic reference's inputs ---------------------------------------


def rmse_warning_threshold(baseline: float, sd: float) -> float:
    """The RMSE above which a fit is flagged: max(0, baseline − z·sd) (module docstring)."""
    return max(0.0, baseline - WARNING_Z * sd)


def reference_proportions(proportions: tuple[float, ...]) -> tuple[float, ...]:
    """Class proportions as the synthetic reference takes them: each at least 0.01,
    renormalised and rounded to 2 decimals (so simulations are cached across noisy
    releases; post-processing)."""
    floored = [max(0.01, float(p)) for p in proportions]
    total = sum(floored)
    return tuple(round(p / total, 2) for p in floored)


def reference_spread(mean: float, variance: float) -> tuple[float, float]:
    """(mean, variance) of the [−1, 1] label as the synthetic reference takes them: the mean
    rounded to 2 decimals, the variance to 3 significant digits in [10⁻⁴, 1]."""
    v = min(1.0, max(1e-4, float(variance)))
    return round(float(mean), 2), float(f"{v:.3g}")
