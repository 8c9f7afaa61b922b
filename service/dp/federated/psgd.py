"""``psgd``: private multiparty gradient descent (Rajkumar & Agarwal 2012, seed 002, Alg. 1)
in which every answer a site sends is its own differentially private release.

K sites with n_k rows, N = Σ n_k; objective J(w) = (1/N) Σ_all l(y wᵀx) + (λ/2)‖w‖² with l
convex, |l′| ≤ L = 1, 0 ≤ l″ ≤ c (logistic c = 1/4, Huber c = 1/(2h)); ‖x‖ ≤ 1; y ∈ {−1, +1};
0 < δ < 1.

Round t (t = 1 … T, T = ``iterations``, fixed by the accepted terms): the coordinator sends its
query point v_t to every site; site k answers with the exact grid release

    A_k(v_t) = γ·round((S_k(v_t) + Z_{k,t})/γ),   S_k(v) = Σ_{j∈D_k} â_j x_j,
    â_j = l′(y_j vᵀx_j)·y_j clipped so that |â_j|·‖x_j‖ < C = L,   Z_{k,t} ~ N(0, σ_k² I_d),

fresh in every round (γ = 2⁻³², :class:`service.dp.noise.lattice.GaussianBlock`); the coordinator
forms g_t = (1/N) Σ_k A_k(v_t) + λ v_t and takes a gradient step (schedules below). The clip
never binds in exact arithmetic (|l′| ≤ 1, ‖x‖ ≤ 1); it makes every term's norm provably < C
as computed (:mod:`service.dp.data.clipping`). The released model is the average of the iterates
of the second half (Polyak–Ruppert tail averaging), rounded to the release grid.

Privacy, toward any coordinator (honest, curious or malicious) — the node's own guarantee:

* Site k's whole transcript is its T answers. For every point v, replacing one of its records
  moves S_k(v) by at most 2C exactly and by at most Δ_k = 2C + 2E(n_k) as computed in doubles;
  each answer is a Gaussian mechanism with σ_k ≥ σ·Δ_k/(2C), ρ₁ = (2C)²/(2σ²)-zCDP
  (:mod:`service.dp.federated.gaussian_rounds`). The points may be chosen by the coordinator
  from everything it saw (adaptively, even maliciously): adaptive zCDP composition bounds the
  transcript by ρ = Tρ₁, converted to (ε, δ) (Canonne–Kamath–Steinke by default). A node
  answers exactly T ``noisy_gradient`` tasks of its accepted job (the terms fix T) and no other
  step, so nothing else can be asked of it; the model, the coordinator's steps and anything it
  computes from the answers are post-processing. Each site is charged (ε(Tρ₁, δ), δ) ≤ (ε, δ).
* No answer reuses noise: two answers never share a noise vector, so no linear combination of
  a node's messages cancels its noise (each is independent N(0, σ_k² I) given the queries).
* No certification step and no solver stopping test: the released model is post-processing of
  the answers, so there is no data-dependent failure after the charge (only a cancellation or a
  node's silence ends a job early, with the charge kept and nothing released).

Why not the paper's accounting. Rajkumar & Agarwal's Thm 4.2 proves ε for the whole protocol
only when the party iterating sees just the SUM of the sites' answers (secure sum) and each
site's answers carry a fixed Gaussian share η^k plus per-round noise ρ_t. A coordinator that
sees each site's answers separately subtracts two of them: the fixed share cancels and the
difference is exact up to the per-round noise, and once a site answers noise-free queries (the
certification rounds an earlier PrivFit version ran) it is an exact gradient difference
(ε = ∞ toward the coordinator). PrivFit implements no secure aggregation, so it accounts each
site's answers as the releases they are (above).

Steps. J is λ-strongly convex and, because ‖x‖ ≤ 1 and l″ ≤ c, has a (c + λ)-Lipschitz
gradient: L_J = c + λ is a public bound and z = 1/L_J a safe constant step. Schedules
(``step_size``):

* ``"nesterov"`` (default): Nesterov's method for strongly convex functions,
  v_{t+1} = w_{t+1} + m (w_{t+1} − w_t), w_{t+1} = v_t − z g_t, m = (√κ − 1)/(√κ + 1),
  κ = L_J/λ, with the momentum capped at :data:`MAX_MOMENTUM` (the noise in g_t is amplified
  by about 1/(1 − m); the cap keeps that amplification below 10).
* ``"constant"``: w_{t+1} = w_t − z g_t (Alg. 1 with z_t = 1/L_J).
* ``"decreasing"``: z_t = 1/(L_J + λt), the Robbins–Monro schedule of Alg. 1.

Every schedule only post-processes the answers; it decides utility, never privacy. Noise and
rounds: σ grows like √T, but the tail average over T/2 iterates divides the noise's variance
by about the same factor, so T mainly buys convergence (default :data:`DEFAULT_ITERATIONS`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np

from service.dp.core.accounting import PrivacyCost
from service.dp.core.losses import Loss
from service.dp.core.plan import Plan, plan_kind
from service.dp.core.validation import PrivacyParameterError, check_known_params
from service.dp.data import clipping
from service.dp.federated._common import (
    FederatedCalibration,
    FederatedProblem,
    FloatArray,
    RoundClock,
    Site,
    choice_param,
    exactly,
    finite,
    int_param,
)
from service.dp.federated.gaussian_rounds import (
    CONVERSIONS,
    FLOAT_MARGIN_NOTE,
    GRADIENT_RELEASE,
    GaussianSitePlan,
    NoiseStream,
    RoundsPlan,
    calibrate_rounds,
    site_plan,
)
from service.dp.federated.protocol import Coordinator, FederatedProtocol, run_rounds

__all__ = [
    "DEFAULT_ITERATIONS",
    "MAX_ITERATIONS",
    "MAX_MOMENTUM",
    "NAME",
    "PROTOCOL",
    "SCHEDULES",
    "PSGDPlan",
    "PSGDSite",
    "calibrate",
    "coordinate",
    "party",
    "run",
    "run_parties",
]

NAME: Final[str] = "psgd"
ALLOWED_PARAMS: Final[tuple[str, ...]] = ("iterations", "step_size", "zcdp_conversion")
SCHEDULES: Final[tuple[str, ...]] = ("nesterov", "constant", "decreasing")
#: 50 rounds: on Adult in 5 sites (λ = 10⁻³, δ = 10⁻⁵, 8 runs each) Nesterov's schedule gave
#: 0.821 / 0.824 test accuracy at ε = 0.5 / 1 with T = 50, against 0.814 / 0.816 at T = 20 and
#: 0.817 / 0.823 at T = 100 (more rounds: more noise per round for little more convergence).
DEFAULT_ITERATIONS: Final[int] = 50
MAX_ITERATIONS: Final[int] = 100_000
#: The Lipschitz constant of every supported loss (|l′| ≤ 1): the clip C of each term.
LIPSCHITZ: Final[float] = 1.0
#: Momentum cap of the Nesterov schedule (noise amplification 1/(1 − m) ≤ 10).
MAX_MOMENTUM: Final[float] = 0.9


class PSGDSite(Site):
    """Site k of PSGD: holds its rows and answers each query point with a fresh Gaussian
    release of its gradient sum."""

    def __init__(self, index: int, X: FloatArray, y: FloatArray, loss: Loss) -> None:
        super().__init__(index, X, y)
        self._loss = loss
        self._caps = clipping.clip_caps(clipping.row_norm_bounds(X), LIPSCHITZ)
        self._noise = NoiseStream(self.d)

    def noisy_gradient(
        self, w: FloatArray, sigma: float, rng: np.random.Generator | None
    ) -> FloatArray:
        """γ·round((Σ_j â_j x_j + Z)/γ), Z ~ N(0, σ²I) fresh (module docstring)."""
        slopes = self._loss.derivative(self._y * (self._X @ w)) * self._y
        grad = clipping.clipped_sum(slopes, self._X, self._caps)
        return self._send(self._noise.release(grad, sigma, rng))


class GradientParty(Protocol):
    """What the coordinator may ask a PSGD site: one noisy gradient per round."""

    index: int

    def noisy_gradient(
        self, w: FloatArray, sigma: float, rng: np.random.Generator | None
    ) -> FloatArray: ...


@plan_kind("federated.psgd")
@dataclass(frozen=True, slots=True)
class PSGDPlan(Plan):
    """What PSGD's calibration fixed (module docstring): the Gaussian rounds (σ for sensitivity
    2L), each site's own σ_k, T and the step schedule with its public constants."""

    d: int
    epsilon: float
    delta: float
    loss: str
    c: float
    huber_h: float | None
    regularization: float
    noise: RoundsPlan
    iterations: int
    step_size: str
    smoothness_bound: float
    #: the Nesterov momentum actually used (0 for the other schedules)
    momentum: float
    sites: tuple[GaussianSitePlan, ...]

    @property
    def total(self) -> int:
        return sum(site.n for site in self.sites)

    def record(self) -> dict[str, Any]:
        """The calibration's ``details``: every number under the papers' names."""
        details: dict[str, Any] = {
            "protocol": NAME,
            "K": len(self.sites),
            "N": self.total,
            "d": self.d,
            "epsilon": finite(self.epsilon),
            "delta": finite(self.delta),
            "loss": self.loss,
            "c": finite(self.c),
            "lipschitz": LIPSCHITZ,
            "clip": LIPSCHITZ,
            "regularization": finite(self.regularization),
            "zcdp_conversion": self.noise.zcdp_conversion,
            **self.noise.record(),
            "expected_noise_norm_per_site": finite(self.noise.sigma * math.sqrt(self.d)),
            "iterations": self.iterations,
            "step_size": self.step_size,
            "smoothness_bound": finite(self.smoothness_bound),
            "z0": finite(1.0 / self.smoothness_bound),
            "momentum": finite(self.momentum),
            "averaging_from": self.iterations // 2,
            "float_margin_note": FLOAT_MARGIN_NOTE,
            "release": GRADIENT_RELEASE,
            "sites": [site.record() for site in self.sites],
        }
        if self.huber_h is not None:
            details["huber_h"] = finite(self.huber_h)
        return details


def calibrate(problem: FederatedProblem) -> FederatedCalibration:
    """σ for T Gaussian rounds of sensitivity 2L within (ε, δ), each site's σ_k, and the step
    schedule (module docstring)."""
    check_known_params(problem.params, ALLOWED_PARAMS, NAME)
    iterations = int_param(
        problem.params, "iterations", DEFAULT_ITERATIONS, minimum=1, maximum=MAX_ITERATIONS
    )
    schedule = choice_param(problem.params, "step_size", "nesterov", SCHEDULES)
    conversion = choice_param(problem.params, "zcdp_conversion", "cks", CONVERSIONS)
    if not problem.delta > 0.0:
        raise PrivacyParameterError(
            f"{NAME} is (ε, δ)-DP (Gaussian noise, zCDP) and needs 0 < delta < 1; "
            f"got delta = {problem.delta!r}"
        )
    loss = problem.loss_object()
    d = problem.d
    eps, delta, lam, c = problem.epsilon, problem.delta, problem.regularization, loss.c
    rounds = calibrate_rounds(eps, delta, rounds=iterations, clip=LIPSCHITZ, conversion=conversion)
    smooth = c + lam
    kappa = smooth / lam
    momentum = min((math.sqrt(kappa) - 1.0) / (math.sqrt(kappa) + 1.0), MAX_MOMENTUM)
    plan = PSGDPlan(
        d=d,
        epsilon=eps,
        delta=delta,
        loss=loss.name,
        c=float(c),
        huber_h=float(problem.huber_h) if loss.name == "huber" else None,
        regularization=lam,
        noise=rounds.plan(conversion),
        iterations=iterations,
        step_size=schedule,
        smoothness_bound=smooth,
        momentum=momentum if schedule == "nesterov" else 0.0,
        sites=tuple(site_plan(n, d, LIPSCHITZ, rounds.sigma) for n in problem.site_sizes),
    )
    achieved = rounds.achieved
    cost = PrivacyCost(float(achieved.epsilon), float(delta))
    return FederatedCalibration(
        protocol=NAME,
        site_costs=tuple(cost for _ in problem.site_sizes),
        private=True,
        details=plan.record(),
        composition=(
            f"{iterations} rounds, each site answering every round with a fresh Gaussian "
            f"release of its gradient sum (sensitivity 2L = {rounds.sensitivity:g}, "
            f"σ = {rounds.sigma:.6g}; each site scales its σ by its sum's floating-point "
            f"margin, keeping ρ), released exactly on the 2^-32 grid: ρ = "
            f"{rounds.rho_per_round:.6g} per round, {rounds.rho_total:.6g} in total by adaptive "
            f"zCDP composition, converted to {achieved} "
            f"({'Canonne–Kamath–Steinke' if conversion == 'cks' else 'Bun–Steinke'}) per "
            "dataset, whatever points the coordinator queries"
        ),
        rounds=iterations,
        notes=(
            "every answer a site sends is a Gaussian release with fresh noise, accounted as "
            "released toward the coordinator (no secure aggregation is assumed); the model is "
            "post-processing of the answers",
        ),
        plan=plan,
    )


class _Coordinator(Coordinator):
    """Alg. 1's coordinator: asks every site for its noisy gradient at the query point, steps
    on the sum of the answers, and tail-averages the iterates of the second half."""

    def __init__(
        self,
        *,
        total: int,
        d: int,
        regularization: float,
        smoothness: float,
        momentum: float,
        sigmas: Sequence[float],
        iterations: int,
        schedule: str,
    ) -> None:
        super().__init__(iterations)
        self._total, self._d, self._lam = total, d, regularization
        self._smoothness, self._momentum, self._schedule = smoothness, momentum, schedule
        self._sigmas = list(sigmas)
        self._z0 = 1.0 / smoothness
        self._w = np.zeros(d)
        self._query = self._w.copy()
        self._tail_sum = np.zeros(d)
        self._tail_count = 0
        self._start_average = iterations // 2

    def ask(self, t: int, k: int, party: GradientParty, rng: np.random.Generator | None) -> Any:
        """Site k's answer at the round's query point (one task of a round)."""
        del t
        return party.noisy_gradient(self._query, self._sigmas[k], rng)

    def combine(self, t: int, answers: list[Any], parties: Sequence[Any]) -> None:
        del parties
        total = np.zeros(self._d)
        for answer in answers:
            total += answer  # every site asked at once; summed in site order
        query, lam = self._query, self._lam
        grad = total / self._total + lam * query
        step = self._z0 if self._schedule != "decreasing" else 1.0 / (self._smoothness + lam * t)
        w_next = query - step * grad
        momentum = self._momentum
        self._query = w_next + momentum * (w_next - self._w) if momentum else w_next
        self._w = w_next
        if t >= self._start_average:
            self._tail_sum += self._w
            self._tail_count += 1

    def result(self, rng: np.random.Generator | None) -> FloatArray:
        del rng
        averaged: FloatArray = self._tail_sum / self._tail_count
        return averaged


class PSGD(FederatedProtocol[PSGDPlan]):
    """PSGD's own steps within the shared skeleton (:mod:`.protocol`)."""

    name = NAME
    plan_type = PSGDPlan
    steps = ("noisy_gradient",)

    def calibrate(self, problem: FederatedProblem) -> FederatedCalibration:
        return calibrate(problem)

    def party(
        self, problem: FederatedProblem, plan: PSGDPlan, index: int, X: FloatArray, y: FloatArray
    ) -> PSGDSite:
        del plan
        return PSGDSite(index, X, y, problem.loss_object())

    def coordinator(self, problem: FederatedProblem, plan: PSGDPlan) -> Coordinator:
        del problem
        return _Coordinator(
            total=plan.total,
            d=plan.d,
            regularization=plan.regularization,
            smoothness=plan.smoothness_bound,
            momentum=plan.momentum,
            sigmas=[site.sigma for site in plan.sites],
            iterations=plan.iterations,
            schedule=plan.step_size,
        )

    def perform(
        self,
        site: Any,
        plan: PSGDPlan,
        step: str,
        points: list[FloatArray],
        rng: np.random.Generator | None,
    ) -> FloatArray | None:
        del step  # PSGD's one step
        assert isinstance(site, PSGDSite)
        (point,) = exactly(points, 1)
        # the party's own σ_k: σ scaled by its sum's floating-point margin (gaussian_rounds)
        out: FloatArray = site.noisy_gradient(point, plan.sites[site.index].sigma, rng)
        return out


PROTOCOL: Final[PSGD] = PSGD()


def coordinate(
    sites: Sequence[GradientParty],
    *,
    total: int,
    d: int,
    regularization: float,
    smoothness: float,
    momentum: float,
    sigmas: Sequence[float],
    iterations: int,
    schedule: str,
    rng: np.random.Generator | None,
    clock: RoundClock,
) -> FloatArray:
    """The coordinator of Alg. 1 over the sites' noisy answers: T steps, then the tail
    average of the iterates (post-processing of the answers only)."""
    coordinator = _Coordinator(
        total=total,
        d=d,
        regularization=regularization,
        smoothness=smoothness,
        momentum=momentum,
        sigmas=sigmas,
        iterations=iterations,
        schedule=schedule,
    )
    return run_rounds(coordinator, sites, rng=rng, clock=clock)


#: Site ``index`` of a fit, holding (X, y): the in-process fit and a node build it alike.
party = PROTOCOL.local_party
#: The coordinator over local :class:`PSGDSite` objects or proxies of sites on nodes.
run_parties = PROTOCOL.run_parties
run = PROTOCOL.run
