"""Private evaluation of a linear regression model on a private dataset (issue 29). Pure.

Units. Labels y and predictions p are in the contract's mapped units: y ∈ [−1, 1] is the label
v mapped from its public bounds (y = 2(v − lower)/(upper − lower) − 1), p = clip(wᵀx, −1, 1),
so the residual r = p − y has |r| ≤ 2. RMSE and MAE are reported in the label's own units
(× s, s = (upper − lower)/2); R² is unit-free.

What is released, for a budget ε (pure ε-DP, δ = 0): seven noisy sums over the n rows,

===========================  ========  ===========  =========================================
sum of                       term in   Δ (replace)  ε share
===========================  ========  ===========  =========================================
r²   (→ RMSE, R²)            [0, 4]    4            ε/5
|r|  (→ MAE)                 [0, 2]    2            ε/5
y    (→ R²'s total SS)       [−1, 1]   2            ε/5
y²   (→ R²'s total SS)       [0, 1]    1            ε/5
r⁴   (→ RMSE's interval)     [0, 16]   16           ε/15
y³   (→ R²'s interval)       [−1, 1]   2            ε/15
y⁴   (→ R²'s interval)       [0, 1]    1            ε/15
===========================  ========  ===========  =========================================

Sensitivity. Neighbouring datasets differ by one *replaced* row (n public): the sum of a term
confined to [a, b] loses one term and gains another, so it moves by at most Δ = b − a (the
table). The shares add up to ε (4/5 + 3/15 = 1): sequential composition of seven pure releases.

Exact release of a real sum. Each term q is put on the public grid g = 2⁻²⁰ *before* summing:
t = clip(round(q/g), a/g, b/g), an integer (the clip makes Δ/g hold for the bits computed,
whatever the floating-point error of q). The integer sum T = Σt has sensitivity Δ/g, and
T + Z with Z exact discrete Laplace of scale (Δ/g)/ε_j
(:func:`~service.dp.analysis.evaluation.sample_discrete_laplace`, integer arithmetic only) is
ε_j-DP: the probability ratio at any integer is e^{(|x − T′| − |x − T|)·ε_j g/Δ} ≤ e^{ε_j}.
The released sum is (T + Z)·g (exact in a double). Rounding error: per term |t·g − q| ≤ g/2
plus q's own rounding (a few units of 2⁻⁵³·16), so |T·g − Σq| ≤ n·2⁻²⁰ (0.1 for n = 10⁵),
against noise of standard deviation √2·Δ/ε_j (28 for Σr² at ε = 1).

Estimates (post-processing, moments m = sum/n projected onto their feasible ranges):
RMSE = s·√m_{r²}, MAE = s·m_{|r|}, R² = 1 − m_{r²}/V_y with V_y = m_{y²} − m_y² (absent when
the noisy V_y ≤ 0).

Intervals (post-processing; they cover the *population* values, like the binary evaluation's):
a parametric bootstrap of both error sources. The evaluation set's mean of a term is modelled
as normal with its variance estimated from the released moments (Var r² = m_{r⁴} − m_{r²}²,
Var |r| = m_{r²} − m_{|r|}², and the 2 × 2 covariance of (y, y²) from m_y … m_{y⁴}), each variance
capped by the Bhatia–Davis bound (b − μ)(μ − a) for a term in [a, b]; the release noise is the
same discrete Laplace law. RMSE and MAE take the percentile interval of their replicates. R²
combines a (1 − α/2) interval for m_{r²} and a (1 − α/2) interval for V_y by the union bound
(R² falls in m_{r²} and rises in V_y): [1 − hi_{r²}/lo_V, 1 − lo_{r²}/hi_V], coverage ≥ 1 − α
without the unreleased cross moments of r and y; a lower end is absent (unbounded) when
lo_V ≤ 0.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.dp.analysis.evaluation import (
    DEFAULT_BOOTSTRAP,
    RandBelow,
    bootstrap_discrete_laplace,
    sample_discrete_laplace,
)
from service.dp.core.accounting import ledger_floor

__all__ = [
    "GRID_BITS",
    "STATISTICS",
    "RegressionEvaluation",
    "Statistic",
    "evaluate_regression",
    "integer_terms",
    "noise_scale",
    "noisy_sum",
    "regression_intervals",
    "regression_metrics",
    "terms",
]

#: Terms are rounded to multiples of 2^-GRID_BITS before summing.
GRID_BITS: Final[int] = 20
_UNITS: Final[int] = 2**GRID_BITS


@dataclass(frozen=True, slots=True)
class Statistic:
    """One released sum: its term's public range [low, high] and its share of ε."""

    name: str
    low: int
    high: int
    share: Fraction

    @property
    def sensitivity(self) -> int:
        """Replace-one L1 sensitivity of the sum: high − low."""
        return self.high - self.low


#: The released sums in order (module docstring's table).
STATISTICS: Final[tuple[Statistic, ...]] = (
    Statistic("squared_residuals", 0, 4, Fraction(1, 5)),
    Statistic("absolute_residuals", 0, 2, Fraction(1, 5)),
    Statistic("labels", -1, 1, Fraction(1, 5)),
    Statistic("squared_labels", 0, 1, Fraction(1, 5)),
    Statistic("fourth_power_residuals", 0, 16, Fraction(1, 15)),
    Statistic("cubed_labels", -1, 1, Fraction(1, 15)),
    Statistic("fourth_power_labels", 0, 1, Fraction(1, 15)),
)
_BY_NAME: Final[dict[str, Statistic]] = {s.name: s for s in STATISTICS}
#: The intervals' reported metrics.
METRICS: Final[tuple[str, ...]] = ("rmse", "mae", "r2")


def terms(predictions: Any, y: Any) -> dict[str, NDArray[np.float64]]:
    """Each statistic's per-row terms, with p = clip(predictions, −1, 1) and r = p − y.

    ``ValueError`` (naming the rule, never a value) for non-finite predictions or labels
    outside [−1, 1]."""
    p = np.asarray(predictions, dtype=np.float64)
    yf = np.asarray(y, dtype=np.float64)
    if p.ndim != 1 or yf.shape != p.shape or p.size == 0:
        raise ValueError("predictions and y must be non-empty vectors of the same length")
    if not np.all(np.isfinite(p)):
        raise ValueError("predictions must be finite")
    with np.errstate(invalid="ignore"):
        outside = ~((yf >= -1.0) & (yf <= 1.0))
    if np.any(outside):
        bad = int(outside.sum())
        raise ValueError(f"y must lie in [-1, 1] (the label's bounds mapped); {bad} entries do not")
    r = np.clip(p, -1.0, 1.0) - yf
    r2 = r * r
    y2 = yf * yf
    return {
        "squared_residuals": r2,
        "absolute_residuals": np.abs(r),
        "labels": yf,
        "squared_labels": y2,
        "fourth_power_residuals": r2 * r2,
        "cubed_labels": y2 * yf,
        "fourth_power_labels": y2 * y2,
    }


def integer_terms(values: NDArray[np.float64], stat: Statistic) -> NDArray[np.int64]:
    """round(q / 2⁻²⁰) clipped to [low·2²⁰, high·2²⁰]: the grid terms whose sum is released."""
    scaled = np.rint(np.asarray(values, dtype=np.float64) * _UNITS)
    return np.clip(scaled, stat.low * _UNITS, stat.high * _UNITS).astype(np.int64)


def noise_scale(stat: Statistic, epsilon: float) -> Fraction:
    """Exact discrete Laplace scale, in grid units, of a sum's noise at total budget ε:
    (Δ · 2²⁰) / (share · ε), with ε as its exact binary value."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("epsilon must be a positive finite number")
    return Fraction(stat.sensitivity * _UNITS) / (stat.share * Fraction(epsilon))


def noisy_sum(
    grid_terms: NDArray[np.int64],
    stat: Statistic,
    epsilon: float,
    randbelow: RandBelow = secrets.randbelow,
) -> float:
    """(Σt + Z)·2⁻²⁰ with Z exact discrete Laplace of :func:`noise_scale`; (share·ε)-DP."""
    total = int(np.sum(grid_terms, dtype=np.int64))
    z = sample_discrete_laplace(noise_scale(stat, epsilon), randbelow)
    return float(Fraction(total + z, _UNITS))


def _moments(sums: dict[str, float], n: int) -> dict[str, float]:
    """Released sums / n projected onto what bounded terms allow (each mean in its range;
    m_{|r|}² ≤ m_{r²} ≤ 2m_{|r|}; m_y² ≤ m_{y²})."""
    m = {name: sums[name] / n for name in sums}
    for stat in STATISTICS:
        m[stat.name] = min(max(m[stat.name], float(stat.low)), float(stat.high))
    m["squared_labels"] = max(m["squared_labels"], m["labels"] ** 2)
    return m


def regression_metrics(sums: dict[str, float], n: int, scale: float) -> dict[str, float | None]:
    """RMSE and MAE in label units (× ``scale``) and R² (None when the noisy V_y ≤ 0)."""
    m = _moments(sums, n)
    var_y = m["squared_labels"] - m["labels"] ** 2
    return {
        "rmse": scale * math.sqrt(m["squared_residuals"]),
        "mae": scale * m["absolute_residuals"],
        "r2": 1.0 - m["squared_residuals"] / var_y if var_y > 0 else None,
    }


def _bhatia_davis(variance: float, mean: float, low: float, high: float) -> float:
    return min(max(variance, 0.0), max((high - mean) * (mean - low), 0.0))


def regression_intervals(
    sums: dict[str, float],
    *,
    n: int,
    epsilon: float,
    scale: float,
    confidence: float = 0.95,
    replicates: int = DEFAULT_BOOTSTRAP,
    rng: np.random.Generator | None = None,
) -> dict[str, tuple[float | None, float | None]]:
    """The parametric-bootstrap intervals of the module docstring (reads released sums, public
    n, ε and bounds only)."""
    rng = rng or np.random.default_rng()
    m = _moments(sums, n)
    alpha = 1.0 - confidence

    def noise(name: str) -> NDArray[np.float64]:
        b = float(noise_scale(_BY_NAME[name], epsilon))
        return bootstrap_discrete_laplace(rng, b, (replicates,)) / (_UNITS * n)

    m2, m1 = m["squared_residuals"], m["absolute_residuals"]
    var_r2 = _bhatia_davis(m["fourth_power_residuals"] - m2 * m2, m2, 0.0, 4.0)
    var_r1 = _bhatia_davis(m2 - m1 * m1, m1, 0.0, 2.0)
    r2_rep = m2 + math.sqrt(var_r2 / n) * rng.standard_normal(replicates)
    r2_rep += noise("squared_residuals")
    r1_rep = m1 + math.sqrt(var_r1 / n) * rng.standard_normal(replicates)
    r1_rep += noise("absolute_residuals")

    my, my2 = m["labels"], m["squared_labels"]
    var_y = _bhatia_davis(my2 - my * my, my, -1.0, 1.0)
    var_y2 = _bhatia_davis(m["fourth_power_labels"] - my2 * my2, my2, 0.0, 1.0)
    bound = math.sqrt(var_y * var_y2)
    cov = min(max(m["cubed_labels"] - my * my2, -bound), bound)
    l11 = math.sqrt(var_y)
    l21 = cov / l11 if l11 > 0 else 0.0
    l22 = math.sqrt(max(var_y2 - l21 * l21, 0.0))
    g1, g2 = rng.standard_normal(replicates), rng.standard_normal(replicates)
    a = my + (l11 * g1) / math.sqrt(n) + noise("labels")
    b = my2 + (l21 * g1 + l22 * g2) / math.sqrt(n) + noise("squared_labels")
    v_rep = b - a * a

    def quantiles(values: NDArray[np.float64], level: float) -> tuple[float, float]:
        lo, hi = np.quantile(values, [level / 2, 1 - level / 2])
        return float(lo), float(hi)

    rmse = quantiles(scale * np.sqrt(np.clip(r2_rep, 0.0, 4.0)), alpha)
    mae = quantiles(scale * np.clip(r1_rep, 0.0, 2.0), alpha)
    lo_r2, hi_r2 = quantiles(np.clip(r2_rep, 0.0, 4.0), alpha / 2)
    lo_v, hi_v = quantiles(v_rep, alpha / 2)
    r2_low = 1.0 - hi_r2 / lo_v if lo_v > 0 else None
    r2_high = 1.0 - lo_r2 / hi_v if hi_v > 0 else None
    return {"rmse": rmse, "mae": mae, "r2": (r2_low, r2_high)}


@dataclass(frozen=True, slots=True)
class RegressionEvaluation:
    """A private regression evaluation's released sums and their post-processing."""

    epsilon: float
    n: int
    lower: float
    upper: float
    sums: dict[str, float]
    metrics: dict[str, float | None]
    intervals: dict[str, tuple[float | None, float | None]]
    confidence: float
    epsilon_split: dict[str, float]
    scales: dict[str, float]
    #: the ε the noise was calibrated with: the shares' exact sum (≤ the request)
    calibrated_epsilon: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": "regression",
            "epsilon": self.epsilon,
            "n": self.n,
            "label_bounds": {"lower": self.lower, "upper": self.upper},
            "metrics": {
                name: {"estimate": self.metrics[name], "interval": list(self.intervals[name])}
                for name in METRICS
            },
            "units": "rmse and mae in the label's units; sums in the mapped [-1, 1] units",
            "sums": dict(self.sums),
            "confidence": self.confidence,
            "epsilon_split": dict(self.epsilon_split),
            "noise": {
                "law": "discrete Laplace on the sum of terms rounded to multiples of 2^-20, "
                "sampled exactly",
                "grid": 2.0**-GRID_BITS,
                "rounding_error_bound": self.n * 2.0**-GRID_BITS,
                "l1_sensitivity": {s.name: s.sensitivity for s in STATISTICS},
                "scale": dict(self.scales),
            },
        }


def evaluate_regression(
    predictions: NDArray[np.float64],
    y: NDArray[np.float64],
    *,
    epsilon: float,
    lower: float,
    upper: float,
    confidence: float = 0.95,
    randbelow: RandBelow = secrets.randbelow,
    bootstrap_rng: np.random.Generator | None = None,
) -> RegressionEvaluation:
    """The ε-DP evaluation of mapped-unit ``predictions`` (clipped to [−1, 1]) against mapped
    labels ``y`` ∈ [−1, 1], the label's public bounds [lower, upper] giving the units
    (module docstring)."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("epsilon must be a positive finite number")
    if not (math.isfinite(lower) and math.isfinite(upper) and lower < upper):
        raise ValueError("the label's bounds must be finite with lower < upper")
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must lie in (0, 1)")
    per_row = terms(predictions, y)
    n = int(per_row["labels"].size)
    # calibrated with no more than the ledger charged (issue 19 §4)
    eps = ledger_floor(float(epsilon))
    sums = {
        s.name: noisy_sum(integer_terms(per_row[s.name], s), s, eps, randbelow) for s in STATISTICS
    }
    scale = (float(upper) - float(lower)) / 2.0
    return RegressionEvaluation(
        epsilon=float(epsilon),
        n=n,
        lower=float(lower),
        upper=float(upper),
        sums=sums,
        metrics=regression_metrics(sums, n, scale),
        intervals=regression_intervals(
            sums, n=n, epsilon=eps, scale=scale, confidence=confidence, rng=bootstrap_rng
        ),
        confidence=confidence,
        epsilon_split={s.name: float(s.share * Fraction(eps)) for s in STATISTICS},
        scales={s.name: float(noise_scale(s, eps) / _UNITS) for s in STATISTICS},
        calibrated_epsilon=eps,
    )


def epsilon_split_note() -> dict[str, str]:
    """How a regression evaluation's ε is composed (for its record)."""
    return {
        "composition": "sequential: ε/5 to each of Σr², Σ|r|, Σy, Σy² and ε/15 to each of "
        "Σr⁴, Σy³, Σy⁴",
        "neighbours": "replace one row (n public)",
    }
