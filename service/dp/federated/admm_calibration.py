"""``admm``'s calibration: the site graph, the penalty, and the noise of every site's broadcasts
from public quantities only (the protocol and its privacy argument: :mod:`.admm`).

* Laplace-type noise ∝ exp(−ζ‖b‖) (``noise: "laplace"``, the paper's): each of the T broadcasts
  of a site is α-DP for its dataset given the public history (Zhang & Zhu 2017, Thm 1 for DVP,
  Thm 2 for PVP); the T rounds compose (the tighter of basic and, with ``delta_prime``,
  advanced composition) to at most the ε offered.
* Gaussian PVP (``noise: "gaussian"``): σ_p per site so that T rounds are ρ-zCDP, ρ the largest
  total whose conversion is ≤ ε at the δ offered.
* ``perturbation: "none"``: no noise and no guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from service.dp.core.accounting import (
    CompositionChoice,
    PrivacyCost,
    gaussian_zcdp,
    zcdp_compose,
    zcdp_to_dp,
    zcdp_to_dp_cks,
)
from service.dp.core.losses import Loss
from service.dp.core.plan import Plan, plan_kind
from service.dp.core.validation import PrivacyParameterError, check_known_params
from service.dp.federated._common import (
    FederatedCalibration,
    FederatedProblem,
    choice_param,
    finite,
    int_param,
)
from service.dp.federated.gaussian_rounds import CONVERSIONS, max_rho
from service.dp.mechanisms.dp_sgd import per_step_epsilon
from service.dp.optimize import certified

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
    "ADMMPlan",
    "ADMMSitePlan",
    "calibrate",
    "default_penalty",
    "gaussian_default_penalty",
    "neighbours_from_params",
    "per_iteration_alpha",
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
#: Gaussian primal perturbation accounted in zCDP ("gaussian", :mod:`.admm`).
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
#: Gaussian PVP defaults (:mod:`.admm`, "Gaussian defaults").
GAUSSIAN_ITERATIONS = 4
GAUSSIAN_PENALTY_FACTOR = 0.2
#: Multiplier of the default penalty (:mod:`.admm`).
PENALTY_FACTOR = 0.3


# ----------------------------------------------------------------------------- topology


def neighbours_from_params(params: Mapping[str, Any], sites: int) -> list[list[int]]:
    """The graph as sorted neighbour lists, from ``topology`` (``"complete"``, the default,
    or ``"ring"``) or an explicit ``adjacency``: a list of K neighbour lists, or a K×K 0/1
    matrix (recognised as such when every row has K entries, all 0 or 1). The graph must be
    symmetric, without self-loops and connected."""
    K = sites
    if "adjacency" in params:
        if "topology" in params:
            raise PrivacyParameterError("give either topology or adjacency, not both")
        graph = _parse_adjacency(params["adjacency"], K)
    else:
        topology = choice_param(params, "topology", "complete", TOPOLOGIES)
        if topology == "complete":
            graph = [[j for j in range(K) if j != p] for p in range(K)]
        else:
            graph = [sorted({(p - 1) % K, (p + 1) % K} - {p}) for p in range(K)]
    _check_connected(graph)
    return graph


def _parse_adjacency(value: object, K: int) -> list[list[int]]:
    if not isinstance(value, list | tuple) or len(value) != K:
        raise PrivacyParameterError(
            f"adjacency must list the neighbours of each of the {K} sites (or be a {K}×{K} "
            "0/1 matrix)"
        )
    rows: list[list[int]] = []
    for p, row in enumerate(value):
        if not isinstance(row, list | tuple) or any(
            isinstance(v, bool) or not isinstance(v, int | np.integer) for v in row
        ):
            raise PrivacyParameterError(f"adjacency row {p} must be a list of integers")
        rows.append([int(v) for v in row])
    if K > 1 and all(len(r) == K and all(v in (0, 1) for v in r) for r in rows):
        rows = [[j for j, v in enumerate(r) if v == 1] for r in rows]
    graph: list[list[int]] = []
    for p, row in enumerate(rows):
        if any(not 0 <= j < K for j in row):
            raise PrivacyParameterError(f"adjacency row {p} names a site outside 0..{K - 1}")
        if p in row:
            raise PrivacyParameterError(f"adjacency: site {p} cannot be its own neighbour")
        if len(set(row)) != len(row):
            raise PrivacyParameterError(f"adjacency row {p} repeats a neighbour")
        graph.append(sorted(row))
    for p, row in enumerate(graph):
        for j in row:
            if p not in graph[j]:
                raise PrivacyParameterError(
                    f"adjacency must be symmetric: site {p} lists {j} but {j} does not list {p}"
                )
    return graph


def _check_connected(graph: list[list[int]]) -> None:
    seen = {0}
    stack = [0]
    while stack:
        for j in graph[stack.pop()]:
            if j not in seen:
                seen.add(j)
                stack.append(j)
    if len(seen) != len(graph):
        raise PrivacyParameterError(
            "the site graph must be connected (ADMM reaches consensus only on a connected graph)"
        )


def default_penalty(regularization: float, c: float, sites: int, mean_degree: float) -> float:
    """η = 0.3·√(λ(c + λ))/(2K·N̄) (:mod:`.admm`); N̄ = 1 for a single site."""
    degree = mean_degree if mean_degree > 0.0 else 1.0
    return (
        PENALTY_FACTOR * math.sqrt(regularization * (c + regularization)) / (2.0 * sites * degree)
    )


# ----------------------------------------------------------------------------- composition


def per_iteration_alpha(
    epsilon: float, iterations: int, delta_prime: float | None
) -> tuple[float, CompositionChoice | None]:
    """The largest per-iteration α whose T-fold composition (the tighter of basic and, when
    δ′ is given, advanced) is ≤ ε; with the composition bounds at that α."""
    return per_step_epsilon(epsilon, iterations, delta_prime)


# ----------------------------------------------------------------------------- calibration


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


@plan_kind("federated.admm_site")
@dataclass(frozen=True, slots=True)
class ADMMSitePlan(Plan):
    """Site p's numbers for its broadcasts. ``variant`` is ``"none"``, ``"dual"`` (DVP: ζ_p,
    Φ_p and the certified release's α_r), ``"primal"`` (PVP with noise ∝ exp(−ζ‖b‖)) or
    ``"gaussian"`` (Gaussian PVP: σ_p); the fields another variant does not use are None."""

    variant: str
    n: int
    degree: int
    phi: float
    zeta: float | None = None
    kappa: float | None = None
    alpha_bar: float | None = None
    branch: str | None = None
    alpha_objective: float | None = None
    alpha_hat: float | None = None
    jacobian_epsilon: float | None = None
    release_epsilon: float | None = None
    sensitivity_exact_minimiser: float | None = None
    sensitivity: float | None = None
    gradient_bound: float | None = None
    sigma: float | None = None
    expected_noise_norm: float | None = None

    def record(self) -> dict[str, Any]:
        """The site's entry of ``details["sites"]`` (the keys its variant has, in order)."""
        keys = {
            "none": ("Phi", "zeta"),
            "dual": (
                "kappa",
                "alpha_bar",
                "branch",
                "Phi",
                "alpha_objective",
                "alpha_hat",
                "zeta",
                "jacobian_epsilon",
                "release_epsilon",
                "expected_noise_norm",
            ),
            "primal": (
                "Phi",
                "sensitivity_exact_minimiser",
                "sensitivity",
                "gradient_bound",
                "zeta",
                "expected_noise_norm",
            ),
            "gaussian": (
                "Phi",
                "zeta",
                "sensitivity_exact_minimiser",
                "sensitivity",
                "gradient_bound",
                "sigma",
                "expected_noise_norm",
            ),
        }[self.variant]
        out: dict[str, Any] = {"n": self.n, "degree": self.degree}
        for key in keys:
            value = getattr(self, "phi" if key == "Phi" else key)
            out[key] = finite(value) if isinstance(value, float) else value
        return out


@plan_kind("federated.admm")
@dataclass(frozen=True, slots=True)
class ADMMPlan(Plan):
    """What ADMM's calibration fixed: the graph, η, T and every site's noise, with the
    composition (per-iteration α; or zCDP for Gaussian PVP; or none)."""

    perturbation: str
    noise: str
    d: int
    loss: str
    c: float
    huber_h: float | None
    regularization: float
    penalty: float
    penalty_default: bool
    iterations: int
    iterations_default: bool
    neighbours: tuple[tuple[int, ...], ...]
    sites: tuple[ADMMSitePlan, ...]
    #: None for ``perturbation: "none"``
    epsilon: float | None = None
    delta: float = 0.0
    # noise "laplace": the per-iteration α and its composition
    alpha: float | None = None
    composition_method: str | None = None
    basic_total_epsilon: float | None = None
    advanced_total: tuple[float, float] | None = None
    delta_prime: float | None = None
    # noise "gaussian": the zCDP accounting
    zcdp_conversion: str | None = None
    rho_total: float | None = None
    rho_per_round: float | None = None
    epsilon_spent: float | None = None
    epsilon_bun_steinke: float | None = None

    @property
    def total(self) -> int:
        return sum(site.n for site in self.sites)

    @property
    def private(self) -> bool:
        return self.perturbation != "none"

    def record(self) -> dict[str, Any]:
        """The calibration's ``details``: every number under the papers' names."""
        N = self.total
        details: dict[str, Any] = {
            "protocol": NAME,
            "perturbation": self.perturbation,
            "K": len(self.sites),
            "N": N,
            "d": self.d,
            "loss": self.loss,
            "c": finite(self.c),
            "lipschitz": 1.0,
            "regularization": finite(self.regularization),
            "C_R_over_B_p": finite(1.0 / N),
            "penalty": finite(self.penalty),
            "penalty_default": self.penalty_default,
            "iterations": self.iterations,
            "iterations_default": self.iterations_default,
            "neighbours": [list(row) for row in self.neighbours],
            "noise": self.noise,
        }
        if self.huber_h is not None:
            details["huber_h"] = finite(self.huber_h)
        if self.epsilon is None:
            details.update(epsilon=None, delta=0.0, guarantee="none")
        elif self.noise == "gaussian":
            details.update(
                epsilon=finite(self.epsilon),
                delta=finite(self.delta),
                alpha=None,
                composition_method="zcdp",
                basic_total=None,
                advanced_total=None,
                delta_prime=None,
                zcdp_conversion=self.zcdp_conversion,
                rho_total=finite(_number(self.rho_total)),
                rho_per_round=finite(_number(self.rho_per_round)),
                epsilon_spent=finite(_number(self.epsilon_spent)),
                epsilon_bun_steinke=finite(_number(self.epsilon_bun_steinke)),
                solver_slack=SOLVER_SLACK,
            )
        else:
            advanced = self.advanced_total
            details.update(
                epsilon=finite(self.epsilon),
                delta=finite(self.delta),
                alpha=finite(_number(self.alpha)),
                composition_method=self.composition_method,
                basic_total={"epsilon": finite(_number(self.basic_total_epsilon)), "delta": 0.0},
                advanced_total=(
                    None
                    if advanced is None
                    else {"epsilon": finite(advanced[0]), "delta": finite(advanced[1])}
                ),
                delta_prime=None if self.delta_prime is None else finite(self.delta_prime),
            )
        details["sites"] = [site.record() for site in self.sites]
        return details


def _number(value: float | None) -> float:
    if value is None:
        raise ValueError("the plan lacks a number its variant needs")
    return value


def calibrate(problem: FederatedProblem) -> FederatedCalibration:
    """Graph, penalty, per-iteration α and its composition, and ζ (and Φ) per site; or σ per
    site for Gaussian PVP; or no noise for ``perturbation: "none"``."""
    request = _read_request(problem)
    if request.law == "gaussian":
        return _calibrate_gaussian(problem, request)
    if request.perturbation == "none":
        return _calibrate_non_private(problem, request)
    return _calibrate_laplace(problem, request)


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
        penalty = _positive(params["penalty"], "penalty")
    elif gaussian:
        penalty = gaussian_default_penalty(lam, c, K, mean_degree)
    else:
        penalty = default_penalty(lam, c, K, mean_degree)
    delta_prime = params.get("delta_prime")
    if delta_prime is not None:
        if perturbation == "none":
            raise PrivacyParameterError("delta_prime applies only to a private perturbation")
        delta_prime = _positive(delta_prime, "delta_prime")
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


def _calibrate_non_private(problem: FederatedProblem, request: _Request) -> FederatedCalibration:
    """``perturbation: "none"``: nothing charged, nothing guaranteed."""
    T = request.iterations
    plan = ADMMPlan(
        **_public_fields(problem, request),
        sites=tuple(
            ADMMSitePlan(variant="none", n=n, degree=deg, phi=0.0)
            for n, deg in zip(problem.site_sizes, request.degrees, strict=True)
        ),
    )
    return FederatedCalibration(
        protocol=NAME,
        site_costs=tuple(PrivacyCost(0.0, 0.0) for _ in problem.site_sizes),
        private=False,
        details=plan.record(),
        composition=(
            f"no differential privacy: {T} iterations of non-private consensus ADMM "
            "broadcast deterministic functions of the data"
        ),
        rounds=T,
        notes=("not differentially private: ADMM without perturbation",),
        plan=plan,
    )


def _calibrate_laplace(problem: FederatedProblem, request: _Request) -> FederatedCalibration:
    """DVP or PVP with noise ∝ exp(−ζ‖b‖): the per-iteration α whose T-fold composition is
    ≤ ε, and each site's ζ (and Φ) making one broadcast α-DP (Zhang & Zhu 2017, Thms 1–2)."""
    T, perturbation, delta_prime = request.iterations, request.perturbation, request.delta_prime
    eps = problem.epsilon
    alpha, choice = per_iteration_alpha(eps, T, delta_prime)
    basic_total = PrivacyCost(T * alpha, 0.0)
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


def gaussian_default_penalty(
    regularization: float, c: float, sites: int, mean_degree: float
) -> float:
    """η = 0.2·√(λ(c + λ))/(2K·N̄) (:mod:`.admm`, "Gaussian defaults")."""
    degree = mean_degree if mean_degree > 0.0 else 1.0
    return (
        GAUSSIAN_PENALTY_FACTOR
        * math.sqrt(regularization * (c + regularization))
        / (2.0 * sites * degree)
    )


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


def _calibrate_gaussian(problem: FederatedProblem, request: _Request) -> FederatedCalibration:
    """σ_p per site so that T rounds are ρ-zCDP with ρ the largest total whose conversion
    is ≤ ε at the δ offered (:mod:`.admm`, "Gaussian primal perturbation")."""
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


def _positive(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PrivacyParameterError(f"{name} must be a number")
    out = float(value)
    if not math.isfinite(out) or out <= 0.0:
        raise PrivacyParameterError(f"{name} must be a finite number > 0, got {value!r}")
    return out
