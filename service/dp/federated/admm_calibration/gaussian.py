"""``admm`` with Gaussian PVP (``noise: "gaussian"``): σ_p per site so that T rounds are
ρ-zCDP, ρ the largest total whose conversion is ≤ ε at the δ offered
(:mod:`~service.dp.federated.admm`, "Gaussian primal perturbation")."""

from __future__ import annotations

import math

from service.dp.core.accounting import (
    PrivacyCost,
    gaussian_zcdp,
    zcdp_compose,
    zcdp_to_dp,
    zcdp_to_dp_cks,
)
from service.dp.federated._common import (
    FederatedCalibration,
    FederatedProblem,
    choice_param,
    finite,
)
from service.dp.federated.admm_calibration.params import NAME, SOLVER_SLACK
from service.dp.federated.admm_calibration.plans import ADMMPlan, ADMMSitePlan
from service.dp.federated.admm_calibration.request import _public_fields, _Request
from service.dp.federated.gaussian_rounds import CONVERSIONS, max_rho


def _calibrate_gaussian(problem: FederatedProblem, request: _Request) -> FederatedCalibration:
    """σ_p per site so that T rounds are ρ-zCDP with ρ the largest total whose conversion
    is ≤ ε at the δ offered (:mod:`~service.dp.federated.admm`, "Gaussian primal perturbation")."""
    params = problem.params
    conversion = choice_param(params, "zcdp_conversion", "cks", CONVERSIONS)
    eps, delta = problem.epsilon, problem.delta
    T, degrees = request.iterations, request.degrees
    N, lam, penalty = problem.total, problem.regularization, request.penalty
    rho_total = max_rho(eps, delta, conversion)
    rho_round = rho_total / T
    while zcdp_compose([rho_round] * T) > rho_total:  # rounding: T rounds stay within ρ
        rho_round = math.nextafter(rho_round, 0.0)
    convert = zcdp_to_dp_cks if conversion == "cks" else zcdp_to_dp
    sites: list[ADMMSitePlan] = []
    rho_spent = 0.0
    for n, deg in zip(problem.site_sizes, degrees, strict=True):
        delta_p = 2.0 / (lam * n + 2.0 * N * penalty * deg)
        sensitivity = delta_p * (1.0 + SOLVER_SLACK)
        sigma = sensitivity / math.sqrt(2.0 * rho_round)
        while gaussian_zcdp(sensitivity, sigma) > rho_round:  # rounding: never less noise
            sigma = math.nextafter(sigma, math.inf)
        rho_spent = max(rho_spent, zcdp_compose([gaussian_zcdp(sensitivity, sigma)] * T))
        sites.append(
            ADMMSitePlan(
                variant="gaussian",
                n=n,
                degree=deg,
                phi=0.0,
                sensitivity_exact_minimiser=finite(delta_p),
                sensitivity=finite(sensitivity),
                gradient_bound=finite(SOLVER_SLACK / n),
                sigma=finite(sigma),
                expected_noise_norm=finite(sigma * _chi_mean(problem.d)),
            )
        )
    # ρ_spent ≤ ρ_total, whose conversion max_rho checked to be ≤ ε
    achieved = convert(rho_total, delta)
    if rho_spent > rho_total or achieved.epsilon > eps:
        raise ArithmeticError("zCDP calibration exceeded the offered epsilon")
    plan = ADMMPlan(
        **_public_fields(problem, request),
        sites=tuple(sites),
        epsilon=eps,
        delta=delta,
        zcdp_conversion=conversion,
        rho_total=rho_total,
        rho_per_round=rho_round,
        epsilon_spent=float(achieved.epsilon),
        epsilon_bun_steinke=float(zcdp_to_dp(rho_total, delta).epsilon),
    )
    how = (
        "Canonne–Kamath–Steinke 2020 (Cor. 13)"
        if conversion == "cks"
        else "Bun–Steinke 2016 (Prop. 1.3: ε = ρ + 2√(ρ ln(1/δ)))"
    )
    cost = PrivacyCost(eps, delta)
    return FederatedCalibration(
        protocol=NAME,
        site_costs=tuple(cost for _ in problem.site_sizes),
        private=True,
        details=plan.record(),
        composition=(
            f"Gaussian primal variable perturbation: each of the T = {T} broadcasts of a site "
            f"is its exact local step's minimiser plus N(0, σ²I), σ calibrated to the step's "
            f"L2 sensitivity so that every broadcast is ρ = {rho_round:.6g}-zCDP for its "
            f"dataset given the public history; T rounds compose to ρ ≤ {rho_total:.6g}, "
            f"converted with {how} to (ε = {achieved.epsilon:.6g}, δ = {delta:g}); charged "
            f"{cost} per dataset"
        ),
        rounds=T,
        notes=(
            "every intermediate broadcast is treated as released; the rounds are composed in "
            "zCDP and converted to (epsilon, delta) once",
        ),
        plan=plan,
    )


def _chi_mean(d: int) -> float:
    """E‖z‖ for z ~ N(0, I_d): √2·Γ((d + 1)/2)/Γ(d/2)."""
    return math.sqrt(2.0) * math.exp(math.lgamma((d + 1) / 2.0) - math.lgamma(d / 2.0))
