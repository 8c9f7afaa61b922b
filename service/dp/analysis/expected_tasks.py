"""The expected band of a multi-class or regression fit against its trivial model (issue 29).
Pure; spends nothing: it reads only public reference rows (a dataset uploaded with
``allow_non_private``, whose rows are not protected) and public inputs (n, d, ε, δ, λ).

As for binary fits (:func:`service.dp.analysis.auto.expected_accuracy`), ``repeats`` fits of
the mechanism are simulated on the reference: the first min(:data:`~.auto.TEST_ROWS`, rows/2)
rows are the test sample, each fit draws n_sim = min(n, :data:`~.auto.SIMULATED_ROWS`) rows of
the rest and runs at ε_sim = ε·n/n_sim (the noise of every mechanism here depends on n and ε
through nε; DP-SGD's batch is scaled by n_sim/n, :mod:`service.dp.analysis.auto`). Seeded by a
hash of the public inputs, so a quote and its submission agree.

* **multiclass**: score = accuracy of argmax_k (Cx)_k on the test rows; the trivial model
  always answers the reference's majority class, accuracy = its frequency m. Flagged when
  the band's mean < m.
* **regression**: score = RMSE of the clipped prediction clip(wᵀx, −1, 1) in the label's
  own units (the [−1, 1] RMSE times (U − L)/2); the trivial model predicts the reference's
  mean label ȳ, RMSE = sd(y_test)·(U − L)/2 (ȳ taken on the training part, so it is the
  same honest out-of-sample comparison). Flagged when the band's mean > that RMSE.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.dp import fit as dp_fit
from service.dp.analysis.auto import REPEATS, SIMULATED_ROWS, TEST_ROWS, Candidate, _seed
from service.dp.analysis.auto import _simulated_params as simulated_params
from service.dp.data.prepared import prepare_design

__all__ = ["TaskExpectation", "expected_task_band"]

#: The reference a band was simulated on (always public rows for these tasks).
REFERENCE: Final[str] = "public_reference_dataset"


@dataclass(frozen=True, slots=True)
class TaskExpectation:
    """The simulated band (mean, p10–p90) of a fit's score next to the trivial model's."""

    task: str
    metric: str
    mean: float
    p10: float
    p90: float
    draws: int
    baseline: float

    @property
    def worse_than_baseline(self) -> bool:
        """Accuracy below the majority class, or RMSE above the mean's."""
        if self.metric == "rmse":
            return self.mean > self.baseline
        return self.mean < self.baseline

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task": self.task,
            "metric": self.metric,
            "mean": self.mean,
            "p10": self.p10,
            "p90": self.p90,
            "draws": self.draws,
            "reference": REFERENCE,
            "baseline_source": REFERENCE,
        }
        key = "mean_baseline_rmse" if self.metric == "rmse" else "majority_baseline"
        return out | {key: self.baseline}


def expected_task_band(
    mechanism: str,
    *,
    regularization: float,
    params: Mapping[str, Any],
    X: NDArray[np.float64],
    y: NDArray[np.float64],
    task: str,
    n_classes: int,
    n: int,
    epsilon: float,
    delta: float,
    loss: str,
    half_range: float = 1.0,
    repeats: int = REPEATS,
) -> TaskExpectation:
    """The band of the module docstring. ``y``: class indices (multiclass) or the label in
    [−1, 1] (regression; ``half_range`` = (U − L)/2 converts to label units). ValueError when
    the reference is too small or the mechanism refuses."""
    if X.shape[0] < 8:
        raise ValueError("the public reference needs at least 8 rows")
    test_rows = min(TEST_ROWS, X.shape[0] // 2)
    X_test, y_test = X[:test_rows], np.asarray(y[:test_rows], dtype=np.float64)
    pool = np.arange(test_rows, X.shape[0])
    n_sim = min(int(n), SIMULATED_ROWS)
    eps_sim = float(epsilon) * n / n_sim
    candidate = Candidate.of(mechanism, float(regularization), dict(params))
    own = simulated_params(candidate, n, n_sim)
    rng = np.random.default_rng(
        _seed(
            task,
            n_classes,
            n,
            X.shape,
            float(epsilon),
            float(delta),
            loss,
            mechanism,
            float(regularization),
            candidate.params_json,
        )
    )
    scores: list[float] = []
    for _ in range(repeats):
        rows = rng.choice(pool, size=n_sim, replace=n_sim > pool.size)
        design = prepare_design(X[rows], y[rows], task, n_classes)  # type: ignore[arg-type]
        result = dp_fit(
            design,
            None,
            mechanism,
            epsilon=eps_sim,
            delta=delta,
            loss=loss,
            regularization=float(regularization),
            rng=np.random.default_rng(int(rng.integers(0, 2**63 - 1))),
            task=task,  # type: ignore[arg-type]
            n_classes=n_classes,
            **own,
        )
        out = np.nan_to_num(np.asarray(result.model.decision_function(X_test)), nan=0.0)
        if task == "multiclass":
            scores.append(float(np.mean(np.argmax(out, axis=1) == y_test)))
        else:
            residual = y_test - np.clip(out, -1.0, 1.0)
            scores.append(float(np.sqrt(np.mean(residual * residual))) * half_range)
    if task == "multiclass":
        counts = np.bincount(y_test.astype(np.int64), minlength=n_classes)
        baseline = float(counts.max() / max(1, counts.sum()))
        metric = "accuracy"
    else:
        centre = float(np.mean(np.asarray(y)[pool]))
        baseline = float(np.sqrt(np.mean((y_test - centre) ** 2))) * half_range
        metric = "rmse"
    arr = np.asarray(scores)
    return TaskExpectation(
        task=task,
        metric=metric,
        mean=float(arr.mean()),
        p10=float(np.quantile(arr, 0.1)),
        p90=float(np.quantile(arr, 0.9)),
        draws=int(arr.size),
        baseline=baseline,
    )
