"""Regression losses ℓ(r) of the residual r = y − wᵀx, with the constants the privacy proofs need.

Setting (:mod:`service.dp.core.tasks`, task ``regression``): every row has ‖x‖ ≤ 1 and its label
mapped onto y ∈ [−1, 1]. The model is w, its prediction wᵀx, and the per-row loss is ℓ(y − wᵀx).
In w the gradient of one row's loss is −ℓ′(r)·x and its Hessian ℓ″(r)·xxᵀ, so

* a bound L ≥ |ℓ′| is the Lipschitz constant in w of one row's loss (‖x‖ ≤ 1): the gradient
  sensitivity of Σ_i ℓ(r_i) under replace-one is ‖−ℓ′(r)x + ℓ′(r′)x′‖ ≤ 2L;
* a bound c ≥ ℓ″ ≥ 0 is the curvature constant: uuᵀ with u = √ℓ″·x has ‖u‖² ≤ c, exactly the
  quantity objective perturbation's Jacobian term needs
  (:func:`service.dp.mechanisms._common.jacobian_slack`).

The two losses:

* ``squared``: ℓ(r) = r²/2, ℓ′(r) = r, ℓ″ = 1, so c = 1; ℓ′ is bounded by the data only
  (|r| ≤ 1 + ‖w‖), not for every w: no L exists, and the ERM mechanisms whose sensitivity
  needs L (objective and output perturbation) refuse it. AdaSSP
  (:mod:`service.dp.mechanisms.adassp`) perturbs the sufficient statistics XᵀX and Xᵀy
  instead, whose sensitivities need only ‖x‖ ≤ 1 and |y| ≤ 1, and ``non_private`` solves it
  in closed form.
* ``huber`` of width h > 0: ℓ(r) = r²/2 for |r| ≤ h, h|r| − h²/2 beyond;
  ℓ′(r) = clip(r, −h, h) so L = h; ℓ″(r) = 1 for |r| < h and 0 for |r| > h (it jumps at
  |r| = h, where ℓ is still C¹ with a Lipschitz ℓ′, the case CMS11's Huber corollary covers),
  so c = 1. It is convex; since |r| ≤ |y| + |wᵀx| ≤ 1 + ‖w‖, for h ≥ 1 + ‖w‖ no residual
  reaches the linear part and it equals the squared loss (the price of its bound L = h is a
  sensitivity that grows with h).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from service.dp.core.losses import Loss

__all__ = [
    "REGRESSION_LOSSES",
    "RegressionHuberLoss",
    "RegressionLoss",
    "SquaredLoss",
    "get_regression_loss",
]

FloatArray = NDArray[np.float64]


class RegressionLoss(Loss):
    """Base class: ``value``, ``derivative`` and ``second_derivative`` of ℓ act elementwise on
    the residuals r = y − wᵀx (not on margins: the margin solvers of
    :mod:`service.dp.optimize` never see one; :mod:`service.dp.optimize.regression` solves
    these). ``lipschitz`` bounds |ℓ′| (∞ when no bound holds for every w), ``c`` bounds ℓ″."""

    name: str = ""
    c: float = 1.0
    lipschitz: float = math.inf
    #: objective perturbation changes variables through ℓ″ (bounded here: True for both)
    smooth: bool = True
    #: the regression losses act on residuals, the margin losses on margins
    task: str = "regression"

    def value(self, r: FloatArray) -> FloatArray:
        raise NotImplementedError

    def derivative(self, r: FloatArray) -> FloatArray:
        raise NotImplementedError

    def second_derivative(self, r: FloatArray) -> FloatArray:
        raise NotImplementedError


@dataclass(frozen=True)
class SquaredLoss(RegressionLoss):
    """ℓ(r) = r²/2; c = 1, no Lipschitz bound."""

    name: str = "squared"
    c: float = 1.0
    lipschitz: float = math.inf

    def value(self, r: FloatArray) -> FloatArray:
        return 0.5 * r * r

    def derivative(self, r: FloatArray) -> FloatArray:
        return np.asarray(r, dtype=np.float64)

    def second_derivative(self, r: FloatArray) -> FloatArray:
        return np.ones_like(r, dtype=np.float64)


@dataclass(frozen=True)
class RegressionHuberLoss(RegressionLoss):
    """The Huber loss of the residual with width h: r²/2 for |r| ≤ h, h|r| − h²/2 beyond;
    |ℓ′| ≤ L = h, 0 ≤ ℓ″ ≤ c = 1."""

    h: float = 0.5
    name: str = "huber"
    c: float = 1.0
    lipschitz: float = 0.5

    def __post_init__(self) -> None:
        if not (isinstance(self.h, int | float) and math.isfinite(self.h) and self.h > 0.0):
            raise ValueError(f"the Huber width h must be a finite positive number, got {self.h!r}")
        object.__setattr__(self, "lipschitz", float(self.h))

    def value(self, r: FloatArray) -> FloatArray:
        h = self.h
        a = np.abs(r)
        return np.where(a <= h, 0.5 * r * r, h * a - 0.5 * h * h)

    def derivative(self, r: FloatArray) -> FloatArray:
        return np.clip(r, -self.h, self.h)

    def second_derivative(self, r: FloatArray) -> FloatArray:
        return np.where(np.abs(r) <= self.h, 1.0, 0.0)


REGRESSION_LOSSES = ("squared", "huber")


def get_regression_loss(name: str, *, h: float = 0.5) -> RegressionLoss:
    """The regression loss called ``name`` (``squared``, or ``huber`` of width ``h``)."""
    if name == "squared":
        return SquaredLoss()
    if name == "huber":
        return RegressionHuberLoss(h=h)
    raise ValueError(
        f"unknown regression loss {name!r}; choose one of {', '.join(REGRESSION_LOSSES)}"
    )
