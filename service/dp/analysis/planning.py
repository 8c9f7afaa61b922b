"""The privacy–utility planner's numerics (issue 16 item 3). Pure; spends no budget.

Everything here is a function of public quantities (n, d, the mechanism and its parameters)
or of a *public* reference dataset, never of the private data.

**Expected noise** comes from the mechanism's own calibration (:func:`service.dp.calibrate`).

**Excess-risk bound** (output and objective perturbation, Chaudhuri, Monteleoni and Sarwate
2011). Let J(w) = (1/n) Σᵢ ℓ(yᵢ wᵀxᵢ) + (λ/2)‖w‖² with ‖xᵢ‖ ≤ 1 and ℓ'' ≤ c (c = 1/4 for the
logistic loss, 1/(2h) for the Huber loss). J is (c + λ)-smooth, so for its minimiser w* and
any shift Δ: J(w* + Δ) − J(w*) ≤ ((c + λ)/2)‖Δ‖².

* Output perturbation releases w* + b with ‖b‖ ~ Gamma(d, 2/(nλε)) (their Thm 6), so
  E[J(w_priv) − J(w*)] ≤ ((c + λ)/2) E‖b‖² = ((c + λ)/2) d(d + 1) (2/(nλε))².
* Objective perturbation minimises J(w) + bᵀw/n + (Δ/2)‖w‖²; by (λ + Δ)-strong convexity its
  minimiser is within ‖b‖/(n(λ + Δ)) of the minimiser of J + (Δ/2)‖w‖², and ‖b‖ ~
  Gamma(d, 2/ε′) (their Alg. 2), so the same smoothness step bounds the excess of that
  objective by ((c + λ + Δ)/2) d(d + 1)/d² · E[‖b‖/(n(λ + Δ))]² (the calibration's
  ``expected_coef_shift_bound`` is E‖b‖/(n(λ + Δ))).

Which mechanisms have a bound, and their shift and smoothness terms, is read from the
registry: each mechanism's ``capabilities.excess_risk`` (:mod:`service.dp.core.options`).

E‖b‖² = (d + 1)/d · (E‖b‖)² for a Gamma(d, ·) norm. These are the expected-excess forms of
the paper's analysis (its Theorems 18 and 26 turn them into sample-complexity statements that
need the unknown ‖w₀‖); other mechanisms get no bound.

**Simulation** on public reference data: repeatedly draw a training sample of the private
dataset's size n from one half of the reference rows (with replacement when that half is
smaller), fit the mechanism at (ε, λ) and score it on the other half. The mean, spread and
the fraction of draws reaching a target accuracy answer "the smallest ε that reaches accuracy
A with probability p".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.dp import calibrate
from service.dp import fit as dp_fit
from service.dp.core.tasks import Task
from service.dp.data.prepared import prepare_design
from service.dp.mechanisms import MECHANISMS

__all__ = [
    "BOUND_MECHANISMS",
    "MAX_SIMULATED_FITS",
    "GridPoint",
    "bound_mechanisms",
    "excess_risk_bound",
    "plan_point",
    "simulate_accuracy",
    "smallest_epsilon",
]


def bound_mechanisms() -> frozenset[str]:
    """The registry's mechanisms for which :func:`excess_risk_bound` gives a bound."""
    return frozenset(
        name for name, mech in MECHANISMS.items() if mech.capabilities.has_excess_risk_bound
    )


#: Mechanisms for which :func:`excess_risk_bound` gives a bound (the registry's, at import).
BOUND_MECHANISMS: Final[frozenset[str]] = bound_mechanisms()
#: At most this many fits per plan (grid size × repeats), to bound a request's work.
MAX_SIMULATED_FITS: Final[int] = 200
#: Rows used per simulated fit at most (a larger n is simulated at this size: noted).
MAX_SIMULATED_ROWS: Final[int] = 50_000


def _summary(values: tuple[float, ...]) -> dict[str, Any]:
    """draws, mean, sd (ddof 1; 0 for one draw), p10, p50, p90 of simulated scores."""
    arr = np.asarray(values)
    return {
        "draws": len(values),
        "mean": float(arr.mean()),
        "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        "p10": float(np.quantile(arr, 0.1)),
        "p50": float(np.quantile(arr, 0.5)),
        "p90": float(np.quantile(arr, 0.9)),
    }


@dataclass(frozen=True, slots=True)
class GridPoint:
    """The planner's answer at one (ε, λ)."""

    epsilon: float
    regularization: float
    spent_epsilon: float
    spent_delta: float
    expected_noise_norm: float | None
    excess_risk_bound: float | None
    accuracies: tuple[float, ...] = ()
    #: When λ was chosen by the public rule (``"auto"``): the rule's record.
    regularization_rule: Mapping[str, Any] | None = None
    #: The mechanism of this point when the plan's is ``auto`` (chosen per ε), else None.
    mechanism: str | None = None
    #: Simulated RMSEs (numeric labels, in the label's units) instead of accuracies.
    rmses: tuple[float, ...] = ()
    #: When ``auto`` projected the rows at this point: the projection rule's record
    #: (:mod:`service.dp.analysis.projection_rule`).
    projection_rule: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {} if self.mechanism is None else {"mechanism": self.mechanism}
        out |= {
            "epsilon": self.epsilon,
            "regularization": self.regularization,
            "spent_epsilon": self.spent_epsilon,
            "spent_delta": self.spent_delta,
            "expected_noise_norm": self.expected_noise_norm,
            "excess_risk_bound": self.excess_risk_bound,
        }
        if self.regularization_rule is not None:
            out["regularization_rule"] = dict(self.regularization_rule)
        if self.projection_rule is not None:
            out["projection_rule"] = dict(self.projection_rule)
        if self.accuracies:
            out["simulated_accuracy"] = _summary(self.accuracies)
        if self.rmses:
            out["simulated_rmse"] = _summary(self.rmses)
        return out


def excess_risk_bound(
    mechanism: str, details: Mapping[str, Any], expected_noise_norm: float | None
) -> float | None:
    """The bound on E[J(w_priv) − J(w*)] of the module docstring, or None: the shift and
    smoothness come from the mechanism's ``capabilities.excess_risk``."""
    mech = MECHANISMS.get(mechanism)
    terms = None if mech is None else mech.capabilities.excess_risk
    if terms is None or expected_noise_norm is None:
        return None
    found = terms(details, expected_noise_norm)
    if found is None:
        return None
    shift, smooth = found
    # the noise's dimension: dK for a multi-class model (a Gamma(dK, ·) norm), else d
    d = int(details.get("noise_dimension") or details["d"])
    if not math.isfinite(shift):
        return None
    return smooth / 2.0 * (d + 1) / d * shift**2


def plan_point(
    mechanism: str,
    *,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    regularization: float,
    params: Mapping[str, Any],
    task: Task = "binary",
    n_classes: int = 2,
) -> GridPoint:
    """Noise and bound at one (ε, λ) from public n, d (and the task with its K; raises
    ``ValueError`` when invalid)."""
    calibration = calibrate(
        mechanism,
        n=n,
        d=d,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        regularization=regularization,
        task=task,
        n_classes=n_classes,
        **dict(params),
    )
    return GridPoint(
        epsilon=float(epsilon),
        regularization=float(regularization),
        spent_epsilon=float(calibration.epsilon),
        spent_delta=float(calibration.delta),
        expected_noise_norm=calibration.expected_noise_norm,
        excess_risk_bound=excess_risk_bound(
            mechanism, calibration.details, calibration.expected_noise_norm
        ),
    )


def simulate_accuracy(
    X: NDArray[np.float64],
    y: NDArray[np.float64],
    *,
    n: int,
    mechanism: str,
    epsilon: float,
    delta: float,
    loss: str,
    regularization: float,
    params: Mapping[str, Any],
    repeats: int,
    rng: np.random.Generator,
    task: Task = "binary",
    n_classes: int = 2,
) -> tuple[float, ...]:
    """Test scores of ``repeats`` fits of the mechanism on public reference rows (X, y):
    each trained on n rows drawn from a random half and scored on the other half. The score
    is the accuracy for class labels (binary: sign of wᵀx; multi-class: argmax of Cx) and,
    for a numeric label (``task="regression"``), the RMSE of the clipped prediction
    clip(wᵀx, −1, 1) in the label's [−1, 1] units (multiply by (U − L)/2 for the label's)."""
    if X.shape[0] < 4:
        raise ValueError("the reference dataset needs at least 4 rows")
    n_fit = min(int(n), MAX_SIMULATED_ROWS)
    out: list[float] = []
    for _ in range(repeats):
        order = rng.permutation(X.shape[0])
        half = X.shape[0] // 2
        pool, test = order[:half], order[half:]
        rows = rng.choice(pool, size=n_fit, replace=n_fit > pool.size)
        design = prepare_design(X[rows], y[rows], task, n_classes)
        result = dp_fit(
            design,
            None,
            mechanism,
            epsilon=epsilon,
            delta=delta,
            loss=loss,
            regularization=regularization,
            rng=rng,
            task=task,
            n_classes=n_classes,
            **dict(params),
        )
        scores = np.nan_to_num(result.model.decision_function(X[test]), nan=0.0)
        if task == "multiclass":
            out.append(float(np.mean(np.argmax(scores, axis=1) == y[test])))
        elif task == "regression":
            residual = y[test] - np.clip(scores, -1.0, 1.0)
            out.append(float(np.sqrt(np.mean(residual * residual))))
        else:
            out.append(float(np.mean((scores > 0) == (y[test] > 0))))
    return tuple(out)


def smallest_epsilon(
    points: Sequence[GridPoint], *, accuracy: float, probability: float
) -> GridPoint | None:
    """The point of smallest ε whose simulated draws reach ``accuracy`` with empirical
    frequency ≥ ``probability`` (ties in ε: the best frequency), or None."""
    best: tuple[float, float, GridPoint] | None = None
    for point in points:
        if not point.accuracies:
            continue
        freq = float(np.mean(np.asarray(point.accuracies) >= accuracy))
        if freq >= probability and (best is None or (point.epsilon, -freq) < (best[0], -best[1])):
            best = (point.epsilon, freq, point)
    return None if best is None else best[2]
