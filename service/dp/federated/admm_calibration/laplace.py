"""``admm`` with Laplace-type noise ∝ exp(−ζ‖b‖) (``noise: "laplace"``, the paper's): each of
the T broadcasts of a site is α-DP for its dataset given the public history (Zhang & Zhu 2017,
Thm 1 for DVP, Thm 2 for PVP); the T rounds compose (the tighter of basic and, with
``delta_prime``, advanced composition) to at most the ε offered."""

from __future__ import annotations

import math
from fractions import Fraction

from service.dp.core.accounting import CompositionChoice, PrivacyCost, round_up
from service.dp.federated._common import FederatedCalibration, FederatedProblem, finite
from service.dp.federated.admm_calibration.params import NAME, SOLVER_SLACK
from service.dp.federated.admm_calibration.plans import ADMMPlan, ADMMSitePlan
from service.dp.federated.admm_calibration.request import _public_fields, _Request
from service.dp.mechanisms.dp_sgd import per_step_epsilon
from service.dp.optimize import certified

__all__ = ["per_iteration_alpha"]


def per_iteration_alpha(
    epsilon: float, iterations: int, delta_prime: float | None
) -> tuple[float, CompositionChoice | None]:
    """The largest per-iteration α whose T-fold composition (the tighter of basic and, when
    δ′ is given, advanced) is ≤ ε; with the composition bounds at that α."""
    return per_step_epsilon(epsilon, iterations, delta_prime)


def _calibrate_laplace(problem: FederatedProblem, request: _Request) -> FederatedCalibration:
    """DVP or PVP with noise ∝ exp(−ζ‖b‖): the per-iteration α whose T-fold composition is
    ≤ ε, and each site's ζ (and Φ) making one broadcast α-DP (Zhang & Zhu 2017, Thms 1–2)."""
    T, perturbation, delta_prime = request.iterations, request.perturbation, request.delta_prime
    eps = problem.epsilon
    alpha, choice = per_iteration_alpha(eps, T, delta_prime)
    # T·α is ≤ ε exactly; its double is rounded up so the charge is never below it
    basic_total = PrivacyCost(round_up(T * Fraction(alpha)), 0.0)
    if choice is not None and choice.method == "advanced":
        cost, method = choice.advanced, "advanced"
    else:
        cost, method = basic_total, "basic"
    plan = ADMMPlan(
        **_public_fields(problem, request),
        sites=tuple(
            _laplace_site(problem, request, alpha, n, deg)
            for n, deg in zip(problem.site_sizes, request.degrees, strict=True)
        ),
        epsilon=eps,
        delta=problem.delta,
        alpha=alpha,
        composition_method=method,
        basic_total_epsilon=float(basic_total.epsilon),
        advanced_total=(
            None
            if choice is None
            else (float(choice.advanced.epsilon), float(choice.advanced.delta))
        ),
        delta_prime=delta_prime,
    )
    name = (
        "dual variable perturbation (DVP)"
        if perturbation == "dual"
        else ("primal variable perturbation (PVP)")
    )
    theorem = 1 if perturbation == "dual" else 2
    if choice is None:
        how = f"basic composition: T·α = {T}·{alpha:.6g} = {cost.epsilon:.6g}"
    else:
        how = choice.describe(T)
    return FederatedCalibration(
        protocol=NAME,
        site_costs=tuple(cost for _ in problem.site_sizes),
        private=True,
        details=plan.record(),
        composition=(
            f"{name}: each of the T = {T} broadcasts of a site is α = {alpha:.6g}-DP for its "
            f"dataset given the public history (Zhang & Zhu 2017, Thm {theorem}); "
            f"{how}; charged {cost} per dataset"
        ),
        rounds=T,
        notes=(
            "every intermediate broadcast is treated as released; the per-iteration guarantee "
            "of the paper is composed over all iterations",
        ),
        plan=plan,
    )


def _laplace_site(
    problem: FederatedProblem, request: _Request, alpha: float, n: int, deg: int
) -> ADMMSitePlan:
    """One site's noise for an α-DP broadcast: DVP's ζ = α̂/2 with its Φ branch (after the
    certified release's share α_r), or PVP's ζ = α/Δ_p with the solver's slack."""
    N, d, lam, c = problem.total, problem.d, problem.regularization, request.loss.c
    penalty = request.penalty
    strong = lam * n + 2.0 * N * penalty * deg
    if request.perturbation == "dual":
        # the certified release (service.dp.optimize.certified) takes α_r of each round's α;
        # the step objective runs at α₁ = α − α_r
        alpha_1, alpha_r = certified.split_epsilon(
            alpha, certified.release_share(n, certified.base_tolerance(n, d))
        )
        kappa = c / strong
        alpha_bar = 2.0 * math.log1p(kappa)
        if alpha_bar <= alpha_1 / 2.0:
            phi, alpha_hat, branch = 0.0, alpha_1 - alpha_bar, "no_Phi"
        else:
            # ≥ 0 in exact arithmetic on this branch; max() absorbs rounding (more ridge
            # only tightens the Jacobian bound)
            phi = max(
                0.0,
                c / (N * math.expm1(alpha_1 / 4.0)) - lam * n / N - 2.0 * penalty * deg,
            )
            alpha_hat, branch = alpha_1 / 2.0, "Phi"
        zeta = alpha_hat / 2.0
        return ADMMSitePlan(
            variant="dual",
            n=n,
            degree=deg,
            kappa=finite(kappa),
            alpha_bar=finite(alpha_bar),
            branch=branch,
            phi=finite(phi),
            alpha_objective=finite(alpha_1),
            alpha_hat=finite(alpha_hat),
            zeta=finite(zeta),
            jacobian_epsilon=finite(2.0 * math.log1p(c / (strong + N * phi))),
            release_epsilon=finite(alpha_r),
            expected_noise_norm=finite(d / zeta),
        )
    # the solve's slack S/B_p moves each minimiser by ≤ SΔ_p/2 (as for Gaussian PVP)
    sensitivity = (2.0 / strong) * (1.0 + SOLVER_SLACK)
    zeta = alpha / sensitivity
    return ADMMSitePlan(
        variant="primal",
        n=n,
        degree=deg,
        phi=0.0,
        sensitivity_exact_minimiser=finite(2.0 / strong),
        sensitivity=finite(sensitivity),
        gradient_bound=finite(SOLVER_SLACK / n),
        zeta=finite(zeta),
        expected_noise_norm=finite(d / zeta),
    )
