"""Margin losses l(z), z = y·wᵀx, with the constants the ERM privacy proofs need.

Every loss here is convex and differentiable with |l'(z)| ≤ 1; ``c`` bounds |l''(z)|
(docs/design.md §2). Objective perturbation needs l twice differentiable, which the logistic loss is
everywhere and the Huber-smoothed hinge is except at two points where l'' jumps (Chaudhuri et
al. 2011 show the argument still holds with c = 1/(2h)).

* logistic: l(z) = ln(1 + e^{−z}), l'(z) = −σ(−z), l''(z) = σ(z)σ(−z) ≤ 1/4, so c = 1/4.
* huber (Huber-smoothed hinge of width h, Chaudhuri et al. 2011 eq. 7):
  l(z) = 0 for z > 1 + h; (1 + h − z)²/(4h) for |1 − z| ≤ h; 1 − z for z < 1 − h.
  l'(z) ∈ [−1, 0], l''(z) = 1/(2h) on the middle piece and 0 elsewhere, so c = 1/(2h).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import special

__all__ = ["LOSSES", "HuberLoss", "LogisticLoss", "Loss", "get_loss"]

FloatArray = NDArray[np.float64]


class Loss:
    """Base class: ``value``, ``derivative`` and ``second_derivative`` act elementwise on z."""

    name: str = ""
    c: float = 0.0
    #: True when l'' exists everywhere (needed by objective perturbation's proof as printed).
    smooth: bool = True

    def value(self, z: FloatArray) -> FloatArray:
        raise NotImplementedError

    def derivative(self, z: FloatArray) -> FloatArray:
        raise NotImplementedError

    def second_derivative(self, z: FloatArray) -> FloatArray:
        raise NotImplementedError


@dataclass(frozen=True)
class LogisticLoss(Loss):
    """l(z) = ln(1 + e^{−z}); c = 1/4."""

    name: str = "logistic"
    c: float = 0.25
    smooth: bool = True

    def value(self, z: FloatArray) -> FloatArray:
        return np.logaddexp(0.0, -z)

    def derivative(self, z: FloatArray) -> FloatArray:
        return -special.expit(-z)

    def second_derivative(self, z: FloatArray) -> FloatArray:
        s = special.expit(z)
        return s * (1.0 - s)


@dataclass(frozen=True)
class HuberLoss(Loss):
    """Huber-smoothed hinge of width h; c = 1/(2h)."""

    h: float = 0.5
    name: str = "huber"
    c: float = 1.0
    smooth: bool = True

    def __post_init__(self) -> None:
        if not np.isfinite(self.h) or self.h <= 0.0:
            raise ValueError(f"the Huber width h must be a finite positive number, got {self.h!r}")
        object.__setattr__(self, "c", 1.0 / (2.0 * self.h))

    def value(self, z: FloatArray) -> FloatArray:
        h = self.h
        mid = (1.0 + h - z) ** 2 / (4.0 * h)
        return np.where(z > 1.0 + h, 0.0, np.where(z < 1.0 - h, 1.0 - z, mid))

    def derivative(self, z: FloatArray) -> FloatArray:
        h = self.h
        mid = -(1.0 + h - z) / (2.0 * h)
        return np.where(z > 1.0 + h, 0.0, np.where(z < 1.0 - h, -1.0, mid))

    def second_derivative(self, z: FloatArray) -> FloatArray:
        h = self.h
        return np.where(np.abs(1.0 - z) <= h, 1.0 / (2.0 * h), 0.0)


LOSSES = ("logistic", "huber")


def get_loss(name: str, *, h: float = 0.5) -> Loss:
    """The loss called ``name`` (``logistic`` or ``huber`` with width ``h``)."""
    if name == "logistic":
        return LogisticLoss()
    if name == "huber":
        return HuberLoss(h=h)
    raise ValueError(f"unknown loss {name!r}; choose one of {', '.join(LOSSES)}")
