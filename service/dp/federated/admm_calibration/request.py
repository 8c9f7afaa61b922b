"""An ``admm`` request read and checked before any privacy arithmetic (public quantities only),
and the plan fields it fixes for every variant."""

from __future__ import annotations

from typing import Any, NamedTuple

from service.dp.core.losses import Loss
from service.dp.core.validation import (
    PrivacyParameterError,
    check_known_params,
    check_positive_number,
)
from service.dp.federated._common import FederatedProblem, choice_param, int_param
from service.dp.federated.admm_calibration.graph import neighbours_from_params
from service.dp.federated.admm_calibration.params import (
    ALLOWED_PARAMS,
    DEFAULT_ITERATIONS,
    DEFAULT_NOISE,
    DEFAULT_PERTURBATION,
    GAUSSIAN_ITERATIONS,
    MAX_ITERATIONS,
    NAME,
    NOISES,
    PERTURBATIONS,
    default_penalty,
    gaussian_default_penalty,
)


class _Request(NamedTuple):
    """What a request fixes before any privacy arithmetic, checked (public quantities only)."""

    law: str
    perturbation: str
    graph: list[list[int]]
    degrees: list[int]
    iterations: int
    penalty: float
    delta_prime: float | None
    loss: Loss


def _read_request(problem: FederatedProblem) -> _Request:
    """The protocol's parameters, checked in a fixed order (the first problem is reported)."""
    params = problem.params
    check_known_params(params, ALLOWED_PARAMS, NAME)
    law = choice_param(params, "noise", DEFAULT_NOISE, NOISES)
    gaussian = law == "gaussian"
    perturbation = choice_param(
        params, "perturbation", "primal" if gaussian else DEFAULT_PERTURBATION, PERTURBATIONS
    )
    if gaussian:
        _check_gaussian_request(problem, perturbation)
    elif "zcdp_conversion" in params:
        raise PrivacyParameterError('zcdp_conversion applies only to noise "gaussian"')
    K, lam = problem.sites, problem.regularization
    graph = neighbours_from_params(params, K)
    degrees = [len(row) for row in graph]
    mean_degree = sum(degrees) / K
    loss = problem.loss_object()
    c = loss.c
    default_T = GAUSSIAN_ITERATIONS if gaussian else DEFAULT_ITERATIONS
    T = int_param(params, "iterations", default_T, minimum=1, maximum=MAX_ITERATIONS)
    if "penalty" in params:
        penalty = check_positive_number(params["penalty"], "penalty")
    elif gaussian:
        penalty = gaussian_default_penalty(lam, c, K, mean_degree)
    else:
        penalty = default_penalty(lam, c, K, mean_degree)
    delta_prime = params.get("delta_prime")
    if delta_prime is not None:
        if perturbation == "none":
            raise PrivacyParameterError("delta_prime applies only to a private perturbation")
        delta_prime = check_positive_number(delta_prime, "delta_prime")
        if not delta_prime < 1.0:
            raise PrivacyParameterError(f"delta_prime must be < 1, got {delta_prime!r}")
        if delta_prime > problem.delta:
            raise PrivacyParameterError(
                f"delta_prime ({delta_prime:g}) is spent on every dataset and must not exceed "
                f"the delta offered ({problem.delta:g})"
            )
    return _Request(law, perturbation, graph, degrees, T, penalty, delta_prime, loss)


def _public_fields(problem: FederatedProblem, request: _Request) -> dict[str, Any]:
    """The plan's fields common to every variant."""
    loss, params = request.loss, problem.params
    return {
        "perturbation": request.perturbation,
        "noise": request.law,
        "d": problem.d,
        "loss": loss.name,
        "c": float(loss.c),
        "huber_h": float(problem.huber_h) if loss.name == "huber" else None,
        "regularization": problem.regularization,
        "penalty": request.penalty,
        "penalty_default": "penalty" not in params,
        "iterations": request.iterations,
        "iterations_default": "iterations" not in params,
        "neighbours": tuple(tuple(row) for row in request.graph),
    }


def _check_gaussian_request(problem: FederatedProblem, perturbation: str) -> None:
    if perturbation != "primal":
        raise PrivacyParameterError(
            'noise "gaussian" is offered for primal perturbation only (perturbation "primal", '
            "its default): a Gaussian dual perturbation has no per-round L2 sensitivity to "
            "calibrate, since the noise shift that explains a changed record depends on the "
            "released model"
        )
    if "delta_prime" in problem.params:
        raise PrivacyParameterError(
            'delta_prime applies to noise "laplace" only; noise "gaussian" composes in zCDP '
            "and is converted at the delta offered"
        )
    if not problem.delta > 0.0:
        raise PrivacyParameterError(
            'noise "gaussian" needs delta > 0: zCDP converts to (epsilon, delta)-DP only for '
            "delta > 0"
        )
