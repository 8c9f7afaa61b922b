"""The integer error score that private selection uses, per task (issue 29). Pure.

Both selection methods (:mod:`service.dp.analysis.selection`'s exponential mechanism on a
held-out part, :mod:`service.dp.analysis.repetition`'s noisy training score) need, for a fixed
model w, an integer score e(D) = Σ_rows e(w, x_i, y_i) whose per-row term lies in {0, …, Δ}:
replacing one row then moves e by at most Δ, the sensitivity the mechanisms are calibrated to
(exponential mechanism ∝ exp(−ε e/(2Δ)); discrete Laplace of scale Δ/ε_s). An integer sum is
exact in floating point, and each row's term is a function of that row alone, so the bound
holds for the computed values, not only for exact arithmetic.

* **binary**: e = [sign(wᵀx) ≠ y] ∈ {0, 1} (scores > 0 predict +1): Δ = 1, the error count.
* **multiclass**: e = [argmax_k (Cx)_k ≠ y] ∈ {0, 1} (ties to the lowest index, as
  ``MulticlassModel.predict``): Δ = 1, the error count; the choice maximises accuracy.
* **regression**: the clipped squared error in quarter units, quantised up to
  :data:`REGRESSION_RESOLUTION` = q steps: with ŷ = clip(wᵀx, −1, 1) (the prediction the
  service returns, in the label's [−1, 1] units) and y ∈ [−1, 1], (y − ŷ)² ∈ [0, 4], so
  e = ⌈q·(y − ŷ)²/4⌉ ∈ {0, …, q}: Δ = q. In floating point |y − ŷ| ≤ 2 and the division by 4
  and product by q (powers of two) are exact or monotone, so the computed e stays in
  {0, …, q}. Minimising Σe is maximising the negative clipped MSE (equivalently the negative
  RMSE, a monotone function of it) up to the quantisation of 4/q = 1/16 per row in squared
  [−1, 1] units.

A NaN score counts as 0 and ±∞ as ±(the largest double) for every task (each row's term stays
in {0, …, Δ} whatever the model outputs).
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from service.dp.core.base import FittedModel

__all__ = ["REGRESSION_RESOLUTION", "error_score", "score_sensitivity"]

#: q: steps of the quantised clipped squared error per row (a power of two).
REGRESSION_RESOLUTION: Final[int] = 64


def score_sensitivity(task: str) -> int:
    """Δ, the largest per-row term of :func:`error_score` (module docstring)."""
    return REGRESSION_RESOLUTION if task == "regression" else 1


def error_score(
    model: FittedModel, X: NDArray[np.float64], y: NDArray[np.float64], task: str
) -> int:
    """e = Σ_rows of the task's per-row integer error (module docstring): smaller is better."""
    scores = np.nan_to_num(np.asarray(model.decision_function(X), dtype=np.float64), nan=0.0)
    if task == "multiclass":
        predicted = np.argmax(scores, axis=1)
        return int(np.sum(predicted != np.asarray(y).astype(np.int64)))
    if task == "regression":
        residual = np.asarray(y, dtype=np.float64) - np.clip(scores, -1.0, 1.0)
        units = np.ceil(REGRESSION_RESOLUTION * (residual * residual / 4.0))
        return int(np.sum(np.clip(units, 0, REGRESSION_RESOLUTION).astype(np.int64)))
    return int(np.sum((scores > 0) != (y > 0)))
