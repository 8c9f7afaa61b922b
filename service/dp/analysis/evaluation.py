"""Private evaluation of a binary classifier on a private dataset (issue 16 item 1). Pure.

What is released, for a total budget ε split in two halves (sequential composition, ε = ε/2 +
ε/2, pure ε-DP, δ = 0):

* **Confusion matrix** (TP, FP, FN, TN) with ε_cm = ε/2. Neighbouring datasets differ by one
  *replaced* row (n is public and fixed): the old row leaves one cell and the new row enters
  one cell, so the count vector moves by at most one in two cells: L1 sensitivity Δ₁ = 2.
  Each cell gets independent discrete Laplace noise Z with P(Z = k) ∝ exp(−|k| ε_cm / 2)
  (the two-sided geometric law of Ghosh–Roughgarden–Sundararajan), which makes the vector
  ε_cm-DP: the density ratio is exp(ε_cm ‖c − c'‖₁ / 2) ≤ exp(ε_cm).
* **Score histograms** over B public bins of σ(score) ∈ [0, 1] (equal width; the
  classification threshold 0.5 is a bin edge), one histogram per true class, with ε_roc = ε/2:
  a replaced row moves one count out of one (class, bin) cell and into another, Δ₁ = 2 again,
  same noise law. The ROC curve and its AUC are post-processing of the noisy histograms.

The sampler :func:`sample_discrete_laplace` is exact: it uses only integer arithmetic on the
exact rational value of the scale and uniform integers from the CSPRNG (``secrets.randbelow``;
Canonne, Kamath and Steinke 2020, Algorithms 1-2). No float enters a released draw.

Accuracy, precision, recall and F1 are functions of the noisy counts; their confidence
intervals come from a parametric bootstrap that models both sources of error: the evaluation
set as a multinomial sample of size n from the population (cell probabilities estimated from
the clipped noisy counts), and the release noise (the same discrete Laplace law). The
bootstrap reads only released values and public n, so it is post-processing.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.dp.core.accounting import ledger_floor

__all__ = [
    "CELLS",
    "DEFAULT_BINS",
    "METRICS",
    "SENSITIVITY",
    "Evaluation",
    "bootstrap_discrete_laplace",
    "bootstrap_intervals",
    "confusion_counts",
    "discrete_laplace_pmf",
    "evaluate",
    "metrics",
    "roc_from_histograms",
    "sample_discrete_laplace",
    "score_histograms",
]

RandBelow = Callable[[int], int]

#: The confusion matrix's cells, in the released order.
CELLS: Final[tuple[str, ...]] = ("tp", "fp", "fn", "tn")
#: The metrics derived from the confusion matrix.
METRICS: Final[tuple[str, ...]] = ("accuracy", "precision", "recall", "f1")
#: L1 sensitivity of a count vector under replace-one neighbours (one cell −1, one cell +1).
SENSITIVITY: Final[int] = 2
#: Public bins of σ(score) for the ROC histogram (even, so 0.5 is an edge).
DEFAULT_BINS: Final[int] = 20
DEFAULT_BOOTSTRAP: Final[int] = 2000


# --- exact discrete Laplace sampling (CKS 2020) ------------------------------------------------


def _bernoulli(p: Fraction, randbelow: RandBelow) -> bool:
    """Bernoulli(p) for rational p ∈ [0, 1], exactly."""
    return randbelow(p.denominator) < p.numerator


def _bernoulli_exp_le1(gamma: Fraction, randbelow: RandBelow) -> bool:
    """Bernoulli(exp(−γ)) for rational γ ∈ [0, 1] (CKS Alg. 1: the first k with
    A_k = 0, A_k ~ Bernoulli(γ/k), is odd with probability exp(−γ))."""
    k = 1
    while _bernoulli(gamma / k, randbelow):
        k += 1
    return k % 2 == 1


def _bernoulli_exp(gamma: Fraction, randbelow: RandBelow) -> bool:
    """Bernoulli(exp(−γ)) for rational γ ≥ 0: exp(−γ) = exp(−1)^⌊γ⌋ · exp(−(γ − ⌊γ⌋))."""
    whole = math.floor(gamma)
    for _ in range(whole):
        if not _bernoulli_exp_le1(Fraction(1), randbelow):
            return False
    return _bernoulli_exp_le1(gamma - whole, randbelow)


def sample_discrete_laplace(scale: Fraction, randbelow: RandBelow = secrets.randbelow) -> int:
    """One exact draw Z with P(Z = k) = (1 − e^{−1/b}) / (1 + e^{−1/b}) · e^{−|k|/b}, b = scale.

    CKS 2020 Algorithm 2 with b = t/s (integers): U uniform on {0..t−1} accepted with
    probability e^{−U/t} and V ~ Geometric(1 − e^{−1}) on {0, 1, ...} make X = U + tV
    geometric with ratio e^{−1/t}, so ⌊X/s⌋ is geometric with ratio e^{−s/t} = e^{−1/b}; a
    fair sign, rejecting (−, 0) so that 0 is not counted twice, gives the two-sided law.
    """
    if scale <= 0:
        raise ValueError("the discrete Laplace scale must be positive")
    s, t = scale.denominator, scale.numerator  # b = t / s
    while True:
        u = randbelow(t)
        if not _bernoulli_exp(Fraction(u, t), randbelow):
            continue
        v = 0
        while _bernoulli_exp_le1(Fraction(1), randbelow):
            v += 1
        x = (u + t * v) // s
        negative = randbelow(2) == 1
        if negative and x == 0:
            continue
        return -x if negative else x


def discrete_laplace_pmf(k: NDArray[np.int64] | int, scale: float) -> NDArray[np.float64]:
    """P(Z = k) for the discrete Laplace law of scale b: tanh(1/(2b)) e^{−|k|/b}."""
    a = 1.0 / scale
    return np.asarray(math.tanh(a / 2.0) * np.exp(-a * np.abs(np.asarray(k))), dtype=np.float64)


def noise_scale(epsilon: float) -> Fraction:
    """Exact scale b = Δ₁/ε of the count noise for budget ε (ε as its exact binary value)."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("epsilon must be a positive finite number")
    return Fraction(SENSITIVITY) / Fraction(epsilon)


def _noisy(counts: NDArray[np.int64], epsilon: float, randbelow: RandBelow) -> NDArray[np.int64]:
    b = noise_scale(epsilon)
    noise = [sample_discrete_laplace(b, randbelow) for _ in range(counts.size)]
    return counts + np.asarray(noise, dtype=np.int64).reshape(counts.shape)


# --- the private statistics -------------------------------------------------------------------


def confusion_counts(scores: NDArray[np.float64], y: NDArray[np.float64]) -> NDArray[np.int64]:
    """(TP, FP, FN, TN) of the rule "positive when score > 0" against labels y ∈ {−1, +1}."""
    pred = np.asarray(scores) > 0
    pos = np.asarray(y) > 0
    return np.array(
        [
            np.sum(pred & pos),
            np.sum(pred & ~pos),
            np.sum(~pred & pos),
            np.sum(~pred & ~pos),
        ],
        dtype=np.int64,
    )


def score_histograms(
    scores: NDArray[np.float64], y: NDArray[np.float64], bins: int = DEFAULT_BINS
) -> NDArray[np.int64]:
    """Counts per (class, bin) of σ(score) over ``bins`` equal public bins of [0, 1]; row 0 the
    positive class, row 1 the negative class. σ(score) > 0.5 ⇔ score > 0 and bin edges are
    closed on the left, so the upper half of the bins holds exactly the predicted positives."""
    prob = 0.5 * (1.0 + np.tanh(0.5 * np.clip(np.asarray(scores, dtype=np.float64), -700, 700)))
    index = np.clip(np.floor(prob * bins).astype(np.int64), 0, bins - 1)
    # a score exactly 0 (σ = 0.5) is predicted negative: keep it in the lower half
    index[(np.asarray(scores) <= 0) & (index >= bins // 2)] = bins // 2 - 1
    pos = np.asarray(y) > 0
    return np.stack(
        [np.bincount(index[pos], minlength=bins), np.bincount(index[~pos], minlength=bins)]
    ).astype(np.int64)


def metrics(counts: NDArray[Any]) -> dict[str, float]:
    """Accuracy, precision, recall, F1 of (TP, FP, FN, TN) clipped at 0 (an empty
    denominator gives 0)."""
    tp, fp, fn, tn = (max(float(c), 0.0) for c in np.asarray(counts).ravel()[:4])
    total = tp + fp + fn + tn

    def ratio(a: float, b: float) -> float:
        return a / b if b > 0 else 0.0

    return {
        "accuracy": ratio(tp + tn, total),
        "precision": ratio(tp, tp + fp),
        "recall": ratio(tp, tp + fn),
        "f1": ratio(2 * tp, 2 * tp + fp + fn),
    }


def _metrics_matrix(c: NDArray[np.float64]) -> dict[str, NDArray[np.float64]]:
    """:func:`metrics` for a (R, 4) array of count vectors at once."""
    c = np.maximum(c, 0.0)
    tp, fp, fn, tn = c[:, 0], c[:, 1], c[:, 2], c[:, 3]

    def ratio(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
        out = np.zeros_like(a)
        np.divide(a, b, out=out, where=b > 0)
        return out

    return {
        "accuracy": ratio(tp + tn, tp + fp + fn + tn),
        "precision": ratio(tp, tp + fp),
        "recall": ratio(tp, tp + fn),
        "f1": ratio(2 * tp, 2 * tp + fp + fn),
    }


def bootstrap_discrete_laplace(
    rng: np.random.Generator, scale: float, size: tuple[int, ...]
) -> NDArray[np.int64]:
    """Discrete Laplace draws for the bootstrap only (never released): G₁ − G₂ with G
    geometric on {0, 1, ...} of ratio e^{−1/b}."""
    p = -math.expm1(-1.0 / scale)
    return (rng.geometric(p, size) - rng.geometric(p, size)).astype(np.int64)


def bootstrap_intervals(
    noisy: NDArray[np.int64],
    *,
    n: int,
    epsilon: float,
    confidence: float = 0.95,
    replicates: int = DEFAULT_BOOTSTRAP,
    rng: np.random.Generator | None = None,
) -> dict[str, tuple[float, float]]:
    """Percentile intervals for each metric from a parametric bootstrap of the whole release.

    p̂ = max(c̃, 0) / Σ max(c̃, 0) estimates the population's cell probabilities; a replicate
    is c* = Multinomial(n, p̂) + Z with Z the release's discrete Laplace noise (scale 2/ε), and
    the interval is the (α/2, 1 − α/2) quantiles of metric(c*) — sampling and noise together.
    Reads only released counts and public n (post-processing: no privacy cost).
    """
    rng = rng or np.random.default_rng()
    clipped = np.maximum(np.asarray(noisy, dtype=np.float64), 0.0)
    total = clipped.sum()
    p = clipped / total if total > 0 else np.full(4, 0.25)
    sample = rng.multinomial(max(int(n), 0), p, size=replicates).astype(np.float64)
    sample += bootstrap_discrete_laplace(rng, float(noise_scale(epsilon)), (replicates, 4))
    alpha = 1.0 - confidence
    out: dict[str, tuple[float, float]] = {}
    for name, values in _metrics_matrix(sample).items():
        lo, hi = np.quantile(values, [alpha / 2, 1 - alpha / 2])
        out[name] = (float(lo), float(hi))
    return out


def roc_from_histograms(hist: NDArray[Any]) -> tuple[list[float], list[float], float]:
    """FPR and TPR at every public bin edge (threshold from 1 down to 0) and the trapezoid
    AUC, from per-class histograms clipped at 0 (post-processing of the noisy release)."""
    h = np.maximum(np.asarray(hist, dtype=np.float64), 0.0)
    pos, neg = h[0][::-1], h[1][::-1]
    tpr = np.concatenate([[0.0], np.cumsum(pos)]) / max(pos.sum(), 1.0)
    fpr = np.concatenate([[0.0], np.cumsum(neg)]) / max(neg.sum(), 1.0)
    if pos.sum() <= 0:
        tpr = np.linspace(0.0, 1.0, tpr.size)
    if neg.sum() <= 0:
        fpr = np.linspace(0.0, 1.0, fpr.size)
    auc = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2.0))
    return [float(v) for v in fpr], [float(v) for v in tpr], auc


@dataclass(frozen=True, slots=True)
class Evaluation:
    """A private evaluation's released values (all ε-DP post-processing) and its ε split."""

    epsilon: float
    n: int
    counts: dict[str, int]
    metrics: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    confidence: float
    roc: dict[str, Any]
    epsilon_split: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "n": self.n,
            "confusion_matrix": dict(self.counts),
            "metrics": {
                name: {
                    "estimate": self.metrics[name],
                    "interval": list(self.intervals[name]),
                }
                for name in METRICS
            },
            "confidence": self.confidence,
            "roc": self.roc,
            "epsilon_split": dict(self.epsilon_split),
            "noise": {
                "law": "discrete Laplace (two-sided geometric), sampled exactly",
                "l1_sensitivity": SENSITIVITY,
                "scale_confusion_matrix": float(
                    noise_scale(self.epsilon_split["confusion_matrix"])
                ),
                "scale_histogram": float(noise_scale(self.epsilon_split["roc_histogram"])),
            },
        }


def evaluate(
    scores: NDArray[np.float64],
    y: NDArray[np.float64],
    *,
    epsilon: float,
    bins: int = DEFAULT_BINS,
    confidence: float = 0.95,
    randbelow: RandBelow = secrets.randbelow,
    bootstrap_rng: np.random.Generator | None = None,
) -> Evaluation:
    """The ε-DP evaluation of a classifier's ``scores`` against ``y`` (module docstring): ε/2
    to the confusion matrix, ε/2 to the per-class score histograms, both with discrete
    Laplace noise of scale 2/(ε/2) per cell; everything else is post-processing."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("epsilon must be a positive finite number")
    if bins < 2 or bins % 2:
        raise ValueError("bins must be an even number ≥ 2")
    # calibrated with no more than the ledger charged (issue 19 §4); the request is reported
    half = ledger_floor(float(epsilon)) / 2.0
    noisy = _noisy(confusion_counts(scores, y), half, randbelow)
    hist = _noisy(score_histograms(scores, y, bins), half, randbelow)
    n = int(np.asarray(y).size)
    fpr, tpr, auc = roc_from_histograms(hist)
    return Evaluation(
        epsilon=float(epsilon),
        n=n,
        counts={cell: int(v) for cell, v in zip(CELLS, noisy, strict=True)},
        metrics=metrics(noisy),
        intervals=bootstrap_intervals(
            noisy, n=n, epsilon=half, confidence=confidence, rng=bootstrap_rng
        ),
        confidence=confidence,
        roc={
            "bins": bins,
            "bin_edges": [i / bins for i in range(bins + 1)],
            "histogram_positive": [int(v) for v in hist[0]],
            "histogram_negative": [int(v) for v in hist[1]],
            "fpr": fpr,
            "tpr": tpr,
            "auc": auc,
        },
        epsilon_split={"confusion_matrix": half, "roc_histogram": epsilon - half},
    )


def epsilon_split_note() -> Mapping[str, str]:
    """How an evaluation's ε is composed (for its record)."""
    return {
        "composition": "sequential: ε = ε/2 (confusion matrix) + ε/2 (score histograms)",
        "neighbours": "replace one row (n public)",
    }
