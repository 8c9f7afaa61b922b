"""Private evaluation of a K-class classifier on a private dataset (issue 29). Pure.

What is released, for a budget ε (pure ε-DP, δ = 0): the **K × K confusion matrix** C, row i
the true class i, column j the predicted class j = argmax_k score_k (ties to the lowest index),
classes in the label spec's declared order (the contract's encoding y = 0 … K − 1).

Sensitivity. Neighbouring datasets differ by one *replaced* row (n is public and fixed): the old
row leaves its cell (i, j) and the new row enters its cell (i′, j′). If the cells are equal C
does not move; otherwise one count falls by 1 and another rises by 1, so
‖C − C′‖₁ ≤ 2 = Δ₁, whatever K is.

Noise. Every cell gets an independent discrete Laplace draw Z with P(Z = k) ∝ e^{−|k|/b},
b = Δ₁/ε = 2/ε (the exact sampler :func:`~service.dp.analysis.evaluation.sample_discrete_laplace`,
integer arithmetic only). For any output c̃ the ratio of its probabilities under C and C′ is
Π_cells e^{(|c̃ − C′| − |c̃ − C|)/b} ≤ e^{‖C − C′‖₁/b} ≤ e^{2/b} = e^{ε}.

Everything else is post-processing of the noisy matrix, clipped at 0: accuracy = Σ_k C_kk / ΣC,
per-class precision_k = C_kk / Σ_i C_ik (column), recall_k = C_kk / Σ_j C_kj (row),
F1_k = 2C_kk / (row_k + column_k), and macro-F1 = the mean of F1_k over the K classes (an empty
denominator gives 0). Intervals come from the binary evaluation's parametric bootstrap: the
evaluation set as Multinomial(n, p̂) over the K² cells with p̂ the clipped noisy matrix
normalised, plus the release's own discrete Laplace noise, drawn by the evaluations' shared
bootstrap sampler :func:`~service.dp.analysis.evaluation.bootstrap_discrete_laplace` (the same
law, G₁ − G₂ with G geometric of ratio e^{−1/b}; vectorised and not exact, which the bootstrap,
never released, does not need: the exact per-draw sampler of :mod:`service.dp.noise.discrete`
would take minutes for its up to 10⁷ draws); the percentile interval of each metric over the
replicates (reads only released values and public n).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.dp.analysis.evaluation import (
    DEFAULT_BOOTSTRAP,
    SENSITIVITY,
    RandBelow,
    bootstrap_discrete_laplace,
    noise_scale,
    sample_discrete_laplace,
)
from service.dp.core.accounting import ledger_floor
from service.dp.core.tasks import check_task

__all__ = [
    "CLASS_METRICS",
    "MulticlassEvaluation",
    "bootstrap_intervals",
    "confusion_matrix",
    "evaluate_multiclass",
    "metrics",
    "noisy_matrix",
]

#: The per-class metrics.
CLASS_METRICS: Final[tuple[str, ...]] = ("precision", "recall", "f1")
#: Cap on replicates × K² cells drawn by the bootstrap (about a second; from K = 71 on, fewer than
#: the default 2000 replicates, never fewer than :data:`_MIN_REPLICATES`).
_BOOTSTRAP_CELLS: Final[int] = 10_000_000
_MIN_REPLICATES: Final[int] = 200
#: Cells of one bootstrap chunk (memory: 8 bytes each, a few arrays).
_CHUNK_CELLS: Final[int] = 4_000_000


def _check_scores(scores: Any, y: Any) -> tuple[NDArray[np.float64], NDArray[np.int64], int]:
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] < 3:
        raise ValueError("scores must be an (n, K) array with K ≥ 3 classes")
    n, k = s.shape
    check_task("multiclass", k)
    yf = np.asarray(y, dtype=np.float64)
    if yf.shape != (n,):
        raise ValueError("y must hold one class index per row of scores")
    with np.errstate(invalid="ignore"):
        bad = ~((yf >= 0) & (yf <= k - 1) & (yf == np.floor(yf)))
    if np.any(bad):
        raise ValueError(f"y must contain only the class indices 0 to {k - 1}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    return s, yf.astype(np.int64), k


def confusion_matrix(scores: NDArray[np.float64], y: NDArray[np.float64]) -> NDArray[np.int64]:
    """The K × K counts: row = true class index, column = argmax of the row's scores."""
    s, yi, k = _check_scores(scores, y)
    pred = np.argmax(s, axis=1)
    return np.bincount(yi * k + pred, minlength=k * k).reshape(k, k).astype(np.int64)


def noisy_matrix(
    counts: NDArray[np.int64], epsilon: float, randbelow: RandBelow = secrets.randbelow
) -> NDArray[np.int64]:
    """``counts`` plus an independent exact discrete Laplace draw of scale b = 2/ε per cell
    (ε taken as its exact binary value, b exact)."""
    b = noise_scale(epsilon)
    flat = [sample_discrete_laplace(b, randbelow) for _ in range(counts.size)]
    return counts + np.asarray(flat, dtype=np.int64).reshape(counts.shape)


def _ratio(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    out = np.zeros(np.broadcast(a, b).shape, dtype=np.float64)
    np.divide(a, b, out=out, where=b > 0)
    return out


def _metrics_batch(c: NDArray[np.float64]) -> dict[str, NDArray[np.float64]]:
    """Metrics of a (R, K, K) stack of matrices clipped at 0: accuracy and macro_f1 of shape
    (R,), precision/recall/f1 of shape (R, K)."""
    c = np.maximum(c, 0.0)
    diag = np.diagonal(c, axis1=1, axis2=2)
    rows = c.sum(axis=2)
    cols = c.sum(axis=1)
    f1 = _ratio(2.0 * diag, rows + cols)
    return {
        "accuracy": _ratio(diag.sum(axis=1), rows.sum(axis=1)),
        "macro_f1": f1.mean(axis=1),
        "precision": _ratio(diag, cols),
        "recall": _ratio(diag, rows),
        "f1": f1,
    }


def metrics(counts: NDArray[Any]) -> dict[str, Any]:
    """Accuracy, macro-F1 (floats) and per-class precision, recall, F1 (lists in class order)
    of a K × K matrix clipped at 0 (module docstring)."""
    out = _metrics_batch(np.asarray(counts, dtype=np.float64)[None])
    return {
        "accuracy": float(out["accuracy"][0]),
        "macro_f1": float(out["macro_f1"][0]),
        **{name: [float(v) for v in out[name][0]] for name in CLASS_METRICS},
    }


def bootstrap_intervals(
    noisy: NDArray[np.int64],
    *,
    n: int,
    epsilon: float,
    confidence: float = 0.95,
    replicates: int = DEFAULT_BOOTSTRAP,
    rng: np.random.Generator | None = None,
) -> dict[str, Any]:
    """Percentile intervals from the parametric bootstrap of the whole release: a replicate
    is Multinomial(n, p̂) over the K² cells plus discrete Laplace noise of scale 2/ε per cell,
    p̂ = max(c̃, 0)/Σ max(c̃, 0). Replicates are capped so that replicates · K² ≤ 10⁷
    (at least 200).
    Returns (low, high) for accuracy and macro_f1 and a list of them per class for the rest."""
    rng = rng or np.random.default_rng()
    c = np.maximum(np.asarray(noisy, dtype=np.float64), 0.0)
    k = c.shape[0]
    cells = k * k
    total = c.sum()
    p = (c / total).ravel() if total > 0 else np.full(cells, 1.0 / cells)
    reps = max(_MIN_REPLICATES, min(int(replicates), _BOOTSTRAP_CELLS // cells))
    chunk = max(1, _CHUNK_CELLS // cells)
    scale = float(noise_scale(epsilon))
    parts: dict[str, list[NDArray[np.float64]]] = {}
    done = 0
    while done < reps:
        r = min(chunk, reps - done)
        sample = rng.multinomial(max(int(n), 0), p, size=r).astype(np.float64)
        sample += bootstrap_discrete_laplace(rng, scale, (r, cells))
        for name, values in _metrics_batch(sample.reshape(r, k, k)).items():
            parts.setdefault(name, []).append(values)
        done += r
    alpha = 1.0 - confidence
    out: dict[str, Any] = {}
    for name, chunks in parts.items():
        values = np.concatenate(chunks, axis=0)
        lo, hi = np.quantile(values, [alpha / 2, 1 - alpha / 2], axis=0)
        if values.ndim == 1:
            out[name] = (float(lo), float(hi))
        else:
            out[name] = [(float(a), float(b)) for a, b in zip(lo, hi, strict=True)]
    return out


@dataclass(frozen=True, slots=True)
class MulticlassEvaluation:
    """A private multi-class evaluation's released matrix and its post-processing."""

    epsilon: float
    n: int
    classes: list[str]
    counts: list[list[int]]
    metrics: dict[str, Any]
    intervals: dict[str, Any]
    confidence: float
    epsilon_split: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        def metric(name: str, k: int | None = None) -> dict[str, Any]:
            if k is None:
                return {"estimate": self.metrics[name], "interval": list(self.intervals[name])}
            return {
                "estimate": self.metrics[name][k],
                "interval": list(self.intervals[name][k]),
            }

        return {
            "task": "multiclass",
            "epsilon": self.epsilon,
            "n": self.n,
            "classes": list(self.classes),
            "confusion_matrix": {
                "rows": "true class",
                "columns": "predicted class (highest score)",
                "counts": [list(row) for row in self.counts],
            },
            "metrics": {"accuracy": metric("accuracy"), "macro_f1": metric("macro_f1")},
            "per_class": [
                {"class": name, **{m: metric(m, k) for m in CLASS_METRICS}}
                for k, name in enumerate(self.classes)
            ],
            "confidence": self.confidence,
            "epsilon_split": dict(self.epsilon_split),
            "noise": {
                "law": "discrete Laplace (two-sided geometric), sampled exactly",
                "l1_sensitivity": SENSITIVITY,
                "scale_confusion_matrix": float(
                    noise_scale(self.epsilon_split["confusion_matrix"])
                ),
            },
        }


def evaluate_multiclass(
    scores: NDArray[np.float64],
    y: NDArray[np.float64],
    *,
    epsilon: float,
    classes: Sequence[str] | None = None,
    confidence: float = 0.95,
    randbelow: RandBelow = secrets.randbelow,
    bootstrap_rng: np.random.Generator | None = None,
) -> MulticlassEvaluation:
    """The ε-DP evaluation of (n, K) ``scores`` against class indices ``y`` (module
    docstring): the whole ε to the confusion matrix, noise scale 2/ε per cell."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("epsilon must be a positive finite number")
    counts = confusion_matrix(scores, y)
    k = counts.shape[0]
    names = [str(c) for c in classes] if classes is not None else [str(i) for i in range(k)]
    if len(names) != k:
        raise ValueError(f"classes must name the {k} classes of the scores")
    # calibrated with no more than the ledger charged (issue 19 §4)
    eps = ledger_floor(float(epsilon))
    noisy = noisy_matrix(counts, eps, randbelow)
    n = int(counts.sum())
    return MulticlassEvaluation(
        epsilon=float(epsilon),
        n=n,
        classes=names,
        counts=[[int(v) for v in row] for row in noisy],
        metrics=metrics(noisy),
        intervals=bootstrap_intervals(
            noisy, n=n, epsilon=eps, confidence=confidence, rng=bootstrap_rng
        ),
        confidence=confidence,
        epsilon_split={"confusion_matrix": eps},
    )


def epsilon_split_note() -> dict[str, str]:
    """How a multi-class evaluation's ε is composed (for its record)."""
    return {
        "composition": "one release: ε (the K × K confusion matrix, L1 sensitivity 2)",
        "neighbours": "replace one row (n public)",
    }
