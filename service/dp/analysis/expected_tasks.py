"""The expected band of a multi-class or regression fit against its trivial model (issue 29).
Pure; spends nothing: it reads only public reference rows (a dataset uploaded with
``allow_non_private``, whose rows are not protected), a seeded synthetic reference, public
inputs (n, d, ε, δ, λ) and already released values (a private baseline's).

As for binary fits (:func:`service.dp.analysis.auto.expected_accuracy`), ``repeats`` fits of
the mechanism are simulated on the reference: the first
min(:data:`~.auto_simulation.TEST_ROWS`, rows/2) rows are the test sample, each fit draws
n_sim = min(n, :data:`~.auto_simulation.SIMULATED_ROWS`) rows of the rest and runs at
ε_sim = ε·n/n_sim (the noise of every mechanism here depends on n and ε through nε), except
DP-SGD, which keeps the updates, step sizes and per-update noise of its real plan at n
(:func:`~.auto_simulation.simulated_run`). Seeded by a hash of the public inputs, so a quote and
its submission agree.

* **multiclass**: score = accuracy of argmax_k (Cx)_k on the test rows; the trivial model
  always answers the reference's majority class, accuracy = its frequency m. Flagged when
  the band's mean < m.
* **regression**: score = RMSE of the clipped prediction clip(wᵀx, −1, 1) in the label's
  own units (the [−1, 1] RMSE times (U − L)/2); the trivial model predicts the reference's
  mean label ȳ, RMSE = sd(y_test)·(U − L)/2 (ȳ taken on the training part, so it is the
  same honest out-of-sample comparison). Flagged when the band's mean > that RMSE.

**Without a public reference** (:func:`expected_task_band_synthetic`) the fits are simulated
on a fixed, seeded *synthetic* reference at the request's d, built like binary's
:func:`~.auto_simulation.reference_task` (rows on the unit sphere with an intercept coordinate
of weight :data:`~.auto_simulation.INTERCEPT_WEIGHT`, the rest uniform directions u):

* **multiclass** (:func:`multiclass_reference`): class scores s_k = κ·√(d−1)·v_kᵀu + b_k with
  fixed unit directions v_k and κ = :data:`~.auto_simulation.REFERENCE_SIGNAL` (binary's),
  labels drawn from softmax(s), the intercepts b_k set (fixed-point iteration
  b_k += ln(p_k/p̄_k)) so the class frequencies are the given proportions p;
* **regression** (:func:`regression_reference`): y = clip(μ + √V·(√R²·t + √(1 − R²)·e), −1, 1),
  t = √(d−1)·vᵀu (about standard normal), e standard normal, R² = :data:`REGRESSION_SIGNAL`:
  the label's mean μ and variance V given.

The proportions, μ and V are a private baseline's noisy release
(:mod:`.baseline_tasks`, post-processing), or before the release the neutral ones (balanced
classes; μ = 0, V = 1/3, a uniform label). The band is set against that baseline (not the
reference's own) and its one-sided bound, as binary's ``warning_threshold``: accuracy below
m̂ + z·sd, or RMSE above σ̂ − z·sd, is flagged; with no baseline yet there is no warning.
The reference is a crude stand-in for the data: only the baseline is the data's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.dp import fit as dp_fit
from service.dp.analysis.auto_simulation import (
    INTERCEPT_WEIGHT,
    MAX_SIMULATED_DIMENSION,
    REFERENCE_SIGNAL,
    REPEATS,
    SIMULATED_ROWS,
    TEST_ROWS,
    Candidate,
    seed_of,
    simulated_run,
)
from service.dp.analysis.baseline import warning_threshold
from service.dp.analysis.baseline_tasks import rmse_warning_threshold
from service.dp.data.prepared import prepare_design

__all__ = [
    "REGRESSION_SIGNAL",
    "TaskExpectation",
    "expected_task_band",
    "expected_task_band_synthetic",
    "multiclass_reference",
    "regression_reference",
]

#: The public reference rows' name as a band's reference and baseline source.
REFERENCE: Final[str] = "public_reference_dataset"
#: The synthetic reference's name.
SYNTHETIC: Final[str] = "synthetic"
#: R² of the synthetic regression reference (the share of the label's variance a linear
#: model explains): a public stand-in, as binary's κ.
REGRESSION_SIGNAL: Final[float] = 0.5
#: Neutral spread of the synthetic regression reference before any release: μ = 0, V = 1/3.
NEUTRAL_SPREAD: Final[tuple[float, float]] = (0.0, 0.333)
#: Rows of a synthetic reference (test rows + a training pool, as binary's).
SYNTHETIC_ROWS: Final[int] = TEST_ROWS + 2 * SIMULATED_ROWS


@dataclass(frozen=True, slots=True)
class TaskExpectation:
    """The simulated band (mean, p10–p90) of a fit's score next to the trivial model's."""

    task: str
    metric: str
    mean: float
    p10: float
    p90: float
    draws: int
    #: The trivial model's figure (None before a private baseline is released).
    baseline: float | None
    reference: str = REFERENCE
    baseline_source: str = REFERENCE
    #: sd of a privately released baseline (0 for a public one).
    baseline_sd: float = 0.0

    @property
    def threshold(self) -> float | None:
        """The baseline's one-sided bound the band is compared with (module docstring)."""
        if self.baseline is None:
            return None
        if self.metric == "rmse":
            return rmse_warning_threshold(self.baseline, self.baseline_sd)
        return warning_threshold(self.baseline, self.baseline_sd)

    @property
    def worse_than_baseline(self) -> bool:
        """Accuracy below the majority class, or RMSE above the mean's (their bounds)."""
        threshold = self.threshold
        if threshold is None:
            return False
        if self.metric == "rmse":
            return self.mean > threshold
        return self.mean < threshold

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task": self.task,
            "metric": self.metric,
            "mean": self.mean,
            "p10": self.p10,
            "p90": self.p90,
            "draws": self.draws,
            "reference": self.reference,
            "baseline_source": self.baseline_source,
        }
        if self.baseline_source != REFERENCE:
            out |= {"baseline_sd": self.baseline_sd, "warning_threshold": self.threshold}
        key = "mean_baseline_rmse" if self.metric == "rmse" else "majority_baseline"
        return out | {key: self.baseline}


def _scores(
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
    half_range: float,
    repeats: int,
) -> NDArray[np.float64]:
    """The scores (accuracy, or RMSE in label units) of ``repeats`` simulated fits on (X, y):
    the first rows the test sample, draws of n_sim rows from the rest at ε·n/n_sim (DP-SGD:
    :func:`~.auto_simulation.simulated_run`)."""
    test_rows = min(TEST_ROWS, X.shape[0] // 2)
    X_test, y_test = X[:test_rows], np.asarray(y[:test_rows], dtype=np.float64)
    pool = np.arange(test_rows, X.shape[0])
    n_sim = min(int(n), SIMULATED_ROWS)
    candidate = Candidate.of(mechanism, float(regularization), dict(params))
    run = simulated_run(
        candidate,
        n=n,
        n_sim=n_sim,
        d=X.shape[1],
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        task=task,
        n_classes=n_classes,
    )
    rng = np.random.default_rng(
        seed_of(
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
            epsilon=run.epsilon,
            delta=run.delta,
            loss=loss,
            regularization=float(regularization),
            rng=np.random.default_rng(int(rng.integers(0, 2**63 - 1))),
            task=task,  # type: ignore[arg-type]
            n_classes=n_classes,
            **run.params,
        )
        out = np.nan_to_num(np.asarray(result.model.decision_function(X_test)), nan=0.0)
        if task == "multiclass":
            scores.append(float(np.mean(np.argmax(out, axis=1) == y_test)))
        else:
            residual = y_test - np.clip(out, -1.0, 1.0)
            scores.append(float(np.sqrt(np.mean(residual * residual))) * half_range)
    return np.asarray(scores)


def _band(scores: NDArray[np.float64], **fields: Any) -> TaskExpectation:
    """The band (mean, p10, p90, draws) of simulated ``scores``; ``fields`` the rest."""
    return TaskExpectation(
        mean=float(scores.mean()),
        p10=float(np.quantile(scores, 0.1)),
        p90=float(np.quantile(scores, 0.9)),
        draws=int(scores.size),
        **fields,
    )


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
    """The band of the module docstring on public reference rows. ``y``: class indices
    (multiclass) or the label in [−1, 1] (regression; ``half_range`` = (U − L)/2 converts to
    label units). ValueError when the reference is too small or the mechanism refuses."""
    if X.shape[0] < 8:
        raise ValueError("the public reference needs at least 8 rows")
    arr = _scores(
        mechanism,
        regularization=regularization,
        params=params,
        X=X,
        y=y,
        task=task,
        n_classes=n_classes,
        n=n,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        half_range=half_range,
        repeats=repeats,
    )
    test_rows = min(TEST_ROWS, X.shape[0] // 2)
    y_test = np.asarray(y[:test_rows], dtype=np.float64)
    if task == "multiclass":
        counts = np.bincount(y_test.astype(np.int64), minlength=n_classes)
        baseline = float(counts.max() / max(1, counts.sum()))
        metric = "accuracy"
    else:
        centre = float(np.mean(np.asarray(y)[test_rows:]))
        baseline = float(np.sqrt(np.mean((y_test - centre) ** 2))) * half_range
        metric = "rmse"
    return _band(arr, task=task, metric=metric, baseline=baseline)


def _sphere_rows(d: int, rows: int, rng: np.random.Generator) -> tuple[NDArray[np.float64], ...]:
    """(X, U): rows with the intercept coordinate and √(1 − w²)·u, u uniform on S^{d−2}."""
    X = np.empty((rows, d))
    X[:, 0] = INTERCEPT_WEIGHT if d > 1 else 1.0
    u = rng.standard_normal((rows, max(d - 1, 1)))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    if d > 1:
        X[:, 1:] = math.sqrt(1.0 - INTERCEPT_WEIGHT**2) * u
    return X, u


def _direction(d: int, k: int) -> NDArray[np.float64]:
    v = np.random.default_rng(seed_of("direction", d, k)).standard_normal(max(d - 1, 1))
    out: NDArray[np.float64] = v / np.linalg.norm(v)
    return out


def _softmax(s: NDArray[np.float64]) -> NDArray[np.float64]:
    """Row-wise softmax, shifted by each row's maximum."""
    prob: NDArray[np.float64] = np.exp(s - s.max(axis=1, keepdims=True))
    prob /= prob.sum(axis=1, keepdims=True)
    return prob


@lru_cache(maxsize=8)  # up to 6000 × 256 doubles each
def multiclass_reference(
    d: int, proportions: tuple[float, ...], rows: int = SYNTHETIC_ROWS
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The synthetic multi-class reference (module docstring): ``rows`` rows of (X, y), y the
    class index, at class frequencies ``proportions`` (each > 0), fixed for the inputs."""
    k = len(proportions)
    p = np.asarray(proportions, dtype=np.float64)
    if d < 1 or rows < 8 or k < 3 or np.any(p <= 0):
        raise ValueError("reference task needs d >= 1, rows >= 8, K >= 3, proportions > 0")
    p = p / p.sum()
    rng = np.random.default_rng(seed_of("multiclass reference", d, proportions, rows))
    X, u = _sphere_rows(d, rows, rng)
    if d > 1:
        margins = np.stack([u @ _direction(d, c) for c in range(k)], axis=1)
        margins *= REFERENCE_SIGNAL * math.sqrt(d - 1)
    else:
        margins = np.zeros((rows, k))
    b = np.log(p)
    for _ in range(200):  # intercepts matching the mean softmax to p
        b += np.log(p / _softmax(margins + b).mean(axis=0))
    prob = _softmax(margins + b)
    draws = rng.random(rows)[:, None] > np.cumsum(prob, axis=1)
    y = np.minimum(draws.sum(axis=1), k - 1).astype(np.float64)
    X.setflags(write=False)
    y.setflags(write=False)
    return X, y


@lru_cache(maxsize=8)  # up to 6000 × 256 doubles each
def regression_reference(
    d: int, mean: float, variance: float, rows: int = SYNTHETIC_ROWS
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The synthetic regression reference (module docstring): y ∈ [−1, 1] of mean ``mean``
    and variance ``variance`` before clipping, R² = :data:`REGRESSION_SIGNAL`."""
    if d < 1 or rows < 8 or not -1.0 <= mean <= 1.0 or not 0.0 <= variance <= 1.0:
        raise ValueError("reference task needs d >= 1, rows >= 8, |mean| <= 1, variance in [0, 1]")
    rng = np.random.default_rng(seed_of("regression reference", d, mean, variance, rows))
    X, u = _sphere_rows(d, rows, rng)
    signal = REGRESSION_SIGNAL if d > 1 else 0.0
    t = math.sqrt(d - 1) * (u @ _direction(d, 0)) if d > 1 else np.zeros(rows)
    e = rng.standard_normal(rows)
    y = np.clip(
        mean + math.sqrt(variance) * (math.sqrt(signal) * t + math.sqrt(1.0 - signal) * e),
        -1.0,
        1.0,
    )
    X.setflags(write=False)
    y.setflags(write=False)
    return X, y


def expected_task_band_synthetic(
    mechanism: str,
    *,
    regularization: float,
    params: Mapping[str, Any],
    task: str,
    n_classes: int,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    half_range: float = 1.0,
    proportions: tuple[float, ...] | None = None,
    spread: tuple[float, float] | None = None,
    baseline: float | None = None,
    baseline_sd: float = 0.0,
    baseline_source: str,
    repeats: int = REPEATS,
) -> TaskExpectation:
    """The band on the synthetic reference (module docstring) matched to ``proportions``
    (multiclass; balanced when None) or ``spread`` = (μ, V) in [−1, 1] units (regression;
    neutral when None), set against ``baseline`` (the majority frequency, or the mean's RMSE
    in label units; None before a release) and its ``baseline_sd``. Deterministic in its
    inputs (cached); ValueError when the mechanism refuses or d is above
    :data:`~.auto_simulation.MAX_SIMULATED_DIMENSION`."""
    if d > MAX_SIMULATED_DIMENSION:
        raise ValueError(f"no simulation above {MAX_SIMULATED_DIMENSION} encoded features")
    return _synthetic_band(
        mechanism,
        float(regularization),
        Candidate.of(mechanism, float(regularization), dict(params)).params_json,
        task,
        int(n_classes),
        int(n),
        int(d),
        float(epsilon),
        float(delta),
        loss,
        float(half_range),
        proportions,
        spread,
        baseline,
        float(baseline_sd),
        baseline_source,
        repeats,
    )


@lru_cache(maxsize=128)
def _synthetic_band(
    mechanism: str,
    regularization: float,
    params_json: str,
    task: str,
    n_classes: int,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    half_range: float,
    proportions: tuple[float, ...] | None,
    spread: tuple[float, float] | None,
    baseline: float | None,
    baseline_sd: float,
    baseline_source: str,
    repeats: int,
) -> TaskExpectation:
    if task == "multiclass":
        X, y = multiclass_reference(d, proportions or (round(1.0 / n_classes, 4),) * n_classes)
        metric = "accuracy"
    elif task == "regression":
        X, y = regression_reference(d, *(spread or NEUTRAL_SPREAD))
        metric = "rmse"
    else:
        raise ValueError(f"no synthetic reference for task {task!r}")
    arr = _scores(
        mechanism,
        regularization=regularization,
        params=json.loads(params_json),
        X=X,
        y=y,
        task=task,
        n_classes=n_classes,
        n=n,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        half_range=half_range,
        repeats=repeats,
    )
    return _band(
        arr,
        task=task,
        metric=metric,
        baseline=baseline,
        reference=SYNTHETIC,
        baseline_source=baseline_source,
        baseline_sd=baseline_sd,
    )
