"""``non_private``: the exact regularised ERM minimiser, released without noise.

Guarantee: **none**. The released w* = argmin (1/n) Σ l(y_i wᵀx_i) + (λ/2)‖w‖² is a
deterministic function of the data, so P[M(D) = w*_D]/P[M(D′) = w*_D] = 1/0 for neighbours
with different minimisers: no finite ε holds. The calibration therefore reports ε = ∞ and
δ = 0 (read: "no differential privacy"). docs/design.md §3 allows it only for datasets uploaded with
``allow_non_private: true``; that rule belongs to the domain layer. It is the baseline the
private mechanisms are compared with, and the ε → ∞ limit of output and objective
perturbation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from service.dp.core.base import Calibration, FittedModel, Problem, ProgressCallback
from service.dp.core.options import Capabilities, MechanismOptions
from service.dp.mechanisms._common import base_details, check_common, release, report
from service.dp.optimize.solvers import minimize_erm

__all__ = ["CAPABILITIES", "MECHANISM", "NonPrivate", "Options"]


# ---- options and capabilities (service.dp.core.options) ---------------------------------


@dataclass(frozen=True, slots=True)
class Options(MechanismOptions):
    """The exact minimiser has no options of its own (only the loss's `h`)."""


#: No privacy: no (ε, δ), nothing charged, "no DP" in its records.
CAPABILITIES = Capabilities(private=False)


class NonPrivate:
    """The exact minimiser; no privacy (ε = ∞)."""

    name = "non_private"
    options = Options
    capabilities = CAPABILITIES

    def validate_params(self, problem: Problem) -> Problem:
        check_common(problem, (), private=False)
        return problem

    def calibrate(self, problem: Problem) -> Calibration:
        loss = check_common(problem, (), private=False)
        details = base_details(problem, loss)
        details.update(epsilon=math.inf, delta=0.0, guarantee="none", noise="none")
        return Calibration(
            epsilon=math.inf,
            delta=0.0,
            details=details,
            expected_noise_norm=0.0,
            composition="no differential privacy: the exact minimiser is released without noise",
        )

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
        del calibration, rng  # nothing to calibrate, nothing random
        loss = check_common(problem, (), private=False)
        report(progress, 0.0)
        coef = minimize_erm(X, y, loss, regularization=problem.regularization)
        report(progress, 1.0)
        return release(coef)


MECHANISM = NonPrivate()
