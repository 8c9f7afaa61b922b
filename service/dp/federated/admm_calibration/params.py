"""``admm``'s parameters: their names, choices, defaults and limits, and the default penalty η
of each noise law (from λ, the loss's c, K and the graph only;
:mod:`~service.dp.federated.admm`)."""

from __future__ import annotations

import math

__all__ = [
    "ALLOWED_PARAMS",
    "DEFAULT_ITERATIONS",
    "DEFAULT_NOISE",
    "DEFAULT_PERTURBATION",
    "GAUSSIAN_ITERATIONS",
    "GAUSSIAN_PENALTY_FACTOR",
    "MAX_ITERATIONS",
    "NAME",
    "NOISES",
    "PENALTY_FACTOR",
    "PERTURBATIONS",
    "SOLVER_SLACK",
    "TOPOLOGIES",
    "default_penalty",
    "gaussian_default_penalty",
]


NAME = "admm"
ALLOWED_PARAMS = (
    "perturbation",
    "iterations",
    "penalty",
    "topology",
    "adjacency",
    "delta_prime",
    "noise",
    "zcdp_conversion",
)
PERTURBATIONS = ("none", "dual", "primal")
#: Noise laws: the paper's ∝ exp(−ζ‖b‖) ("laplace", pure ε per iteration, composed) or
#: Gaussian primal perturbation accounted in zCDP ("gaussian", :mod:`~service.dp.federated.admm`).
NOISES = ("laplace", "gaussian")
DEFAULT_NOISE = "laplace"
#: Gaussian PVP: the local solve may stop at ‖∇‖ ≤ SOLVER_SLACK/B_p, which moves the released
#: minimiser by ≤ SOLVER_SLACK·Δ_p/2; the sensitivity charged is Δ_p(1 + SOLVER_SLACK).
SOLVER_SLACK = 1e-4
TOPOLOGIES = ("complete", "ring")
DEFAULT_PERTURBATION = "dual"
#: 50 iterations: the paper's runs go to t = 100; every iteration costs α, so fewer, larger
#: steps are cheaper in privacy. A non-private run on Adult (10 sites, λ = 10⁻³) ends within
#: 4·10⁻³ of the centralised minimiser (whose norm is ≈ 7.7) with the default penalty.
DEFAULT_ITERATIONS = 50
MAX_ITERATIONS = 10_000
#: Gaussian PVP defaults (:mod:`~service.dp.federated.admm`, "Gaussian defaults").
GAUSSIAN_ITERATIONS = 4
GAUSSIAN_PENALTY_FACTOR = 0.2
#: Multiplier of the default penalty (:mod:`~service.dp.federated.admm`).
PENALTY_FACTOR = 0.3


def default_penalty(regularization: float, c: float, sites: int, mean_degree: float) -> float:
    """η = 0.3·√(λ(c + λ))/(2K·N̄) (:mod:`~service.dp.federated.admm`); N̄ = 1 for a single site."""
    degree = mean_degree if mean_degree > 0.0 else 1.0
    return (
        PENALTY_FACTOR * math.sqrt(regularization * (c + regularization)) / (2.0 * sites * degree)
    )


def gaussian_default_penalty(
    regularization: float, c: float, sites: int, mean_degree: float
) -> float:
    """η = 0.2·√(λ(c + λ))/(2K·N̄) (:mod:`~service.dp.federated.admm`, "Gaussian defaults")."""
    degree = mean_degree if mean_degree > 0.0 else 1.0
    return (
        GAUSSIAN_PENALTY_FACTOR
        * math.sqrt(regularization * (c + regularization))
        / (2.0 * sites * degree)
    )
