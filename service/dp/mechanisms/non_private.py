"""``non_private``: the exact regularised ERM minimiser, released without noise.

Guarantee: **none**. The released w* = argmin (1/n) Σ l(y_i wᵀx_i) + (λ/2)‖w‖² is a
deterministic function of the data, so P[M(D) = w*_D]/P[M(D′) = w*_D] = 1/0 for neighbours
with different minimisers: no finite ε holds. The calibration therefore reports ε = ∞ and
δ = 0 (read: "no differential privacy"). docs/design.md §3 allows it only for datasets uploaded with
``allow_non_private: true``; that rule belongs to the domain layer. It is the baseline the
private mechanisms are compared with, and the ε → ∞ limit of output and objective
perturbation.

Regression (``task="regression"``): the minimiser of (1/n)Σ ℓ(y_i − wᵀx_i) + (λ/2)‖w‖², the
ridge closed form (XᵀX + nλI)⁻¹Xᵀy for the squared loss and semismooth Newton for the Huber
loss of the residual (:mod:`service.dp.optimize.regression`); the limit ε → ∞ of ``adassp``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.dp.core.base import Calibration, FittedModel, Problem, ProgressCallback
from service.dp.core.options import Capabilities, MechanismOptions
from service.dp.core.plan import plan_kind
from service.dp.core.regression_losses import RegressionLoss
from service.dp.mechanisms import multiclass
from service.dp.mechanisms._common import (
    Inputs,
    MechanismPlan,
    check_common,
    release,
    report,
    require_plan,
)
from service.dp.optimize.regression import minimize_regression
from service.dp.optimize.solvers import minimize_erm

__all__ = [
    "CAPABILITIES",
    "MECHANISM",
    "NonPrivate",
    "NonPrivatePlan",
    "Options",
]


@plan_kind("non_private")
@dataclass(frozen=True, slots=True)
class NonPrivatePlan(MechanismPlan):
    """The exact minimiser of the inputs' objective: no noise, no privacy (ε = ∞)."""

    mechanism = "non_private"

    def details(self) -> dict[str, Any]:
        details = self.inputs.details()
        details.update(epsilon=math.inf, delta=0.0, guarantee="none", noise="none")
        return details

    def calibration(self) -> Calibration:
        return Calibration(
            epsilon=math.inf,
            delta=0.0,
            details=self.details(),
            expected_noise_norm=0.0,
            composition="no differential privacy: the exact minimiser is released without noise",
            plan=self,
        )


# ---- options and capabilities (service.dp.core.options) ---------------------------------


@dataclass(frozen=True, slots=True)
class Options(MechanismOptions):
    """The exact minimiser has no options of its own (only the loss's `h`)."""


#: No privacy: no (ε, δ), nothing charged, "no DP" in its records.
CAPABILITIES = Capabilities(private=False, tasks=frozenset({"binary", "multiclass", "regression"}))


class NonPrivate:
    """The exact minimiser; no privacy (ε = ∞)."""

    name = "non_private"
    options = Options
    capabilities = CAPABILITIES

    def validate_params(self, problem: Problem) -> Problem:
        check_common(problem, (), private=False)
        return problem

    def calibrate(self, problem: Problem) -> Calibration:
        return NonPrivatePlan(inputs=Inputs.of(problem)).calibration()

    def run(
        self,
        X: NDArray[np.float64],
        y: NDArray[np.float64],
        problem: Problem,
        calibration: Calibration,
        *,
        rng: np.random.Generator | None,
        progress: ProgressCallback | None,
    ) -> FittedModel:
        del problem, rng  # the plan holds the objective; nothing is random
        plan = require_plan(calibration, NonPrivatePlan)
        if plan.inputs.task == "multiclass":
            return multiclass.run_non_private(X, y, plan.inputs, progress=progress)
        loss = plan.inputs.loss_function()
        report(progress, 0.0)
        if plan.inputs.task == "regression":
            coef = _regression_minimiser(X, y, plan)
        else:
            coef = minimize_erm(X, y, loss, regularization=plan.inputs.regularization)
        report(progress, 1.0)
        return release(coef)


def _regression_minimiser(
    X: NDArray[np.float64], y: NDArray[np.float64], plan: NonPrivatePlan
) -> NDArray[np.float64]:
    """The exact regression minimiser (ridge closed form, or Huber by semismooth Newton)."""
    loss = plan.inputs.loss_function()
    if not isinstance(loss, RegressionLoss):  # pragma: no cover - the plan's task decides
        raise TypeError("a regression plan names a regression loss")
    return minimize_regression(X, y, loss, regularization=plan.inputs.regularization)


MECHANISM = NonPrivate()
