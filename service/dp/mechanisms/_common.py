"""Helpers shared by the single-dataset ERM mechanisms (not part of the public API)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import special

from service.dp import noise
from service.dp.accounting import check_epsilon_delta
from service.dp.base import LinearModel, Problem, ProgressCallback
from service.dp.losses import Loss, get_loss
from service.dp.validation import (
    PrivacyParameterError,
    check_dimensions,
    check_known_params,
    check_regularization,
)

__all__ = [
    "base_details",
    "check_common",
    "chi_mean",
    "problem_loss",
    "release",
    "report",
    "require_smooth_loss",
]


def problem_loss(problem: Problem) -> Loss:
    """The loss object named by the problem (Huber with width ``problem.huber_h``)."""
    return get_loss(problem.loss, h=problem.huber_h)


def check_common(
    problem: Problem, allowed_params: tuple[str, ...], *, private: bool = True
) -> Loss:
    """Checks every ERM mechanism needs: n, d, λ, loss, known params, and (ε, δ) if private."""
    check_dimensions(problem.n, problem.d)
    check_regularization(problem.regularization)
    if private:
        check_epsilon_delta(problem.epsilon, problem.delta)
    check_known_params(problem.params, allowed_params, problem.mechanism)
    try:
        return problem_loss(problem)
    except ValueError as exc:
        raise PrivacyParameterError(str(exc)) from exc


def require_smooth_loss(loss: Loss, mechanism: str) -> None:
    """Objective-perturbation proofs change variables through l''; refuse losses without it."""
    if not loss.smooth:
        raise PrivacyParameterError(
            f"{mechanism} needs a loss with a bounded second derivative (logistic or huber); "
            f"{loss.name!r} has none"
        )


def base_details(problem: Problem, loss: Loss) -> dict[str, Any]:
    """The public inputs every calibration reports."""
    details: dict[str, Any] = {
        "n": problem.n,
        "d": problem.d,
        "epsilon": float(problem.epsilon),
        "delta": float(problem.delta),
        "loss": loss.name,
        "c": float(loss.c),
        "lipschitz": 1.0,
        "regularization": float(problem.regularization),
    }
    if loss.name == "huber":
        details["huber_h"] = float(problem.huber_h)
    return details


def chi_mean(d: int) -> float:
    """E‖g‖ for g ~ N(0, I_d): √2 Γ((d+1)/2)/Γ(d/2)."""
    return math.sqrt(2.0) * math.exp(special.gammaln((d + 1) / 2.0) - special.gammaln(d / 2.0))


def release(coef: NDArray[np.float64]) -> LinearModel:
    """Round the released weights to the public grid (DESIGN §2) and wrap them."""
    return LinearModel(coef=noise.round_to_grid(np.asarray(coef, dtype=np.float64)))


def report(progress: ProgressCallback | None, fraction: float) -> None:
    if progress is not None:
        progress(fraction)
