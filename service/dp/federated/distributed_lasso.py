"""``distributed_lasso``: proximal gradient (ISTA/FISTA) on gradients shared by the sites
(Li et al. 2016 via seed 001 §2.2, Alg. 1), without noise (not DP) or with Gaussian noise
on clipped gradients ((ε, δ)-DP through zCDP).

Objective (‖x‖ ≤ 1; a binary label's y ∈ {−1, +1} used as regression targets, prediction
sign(wᵀx); or a numeric label's y ∈ [−1, 1], the public bounds [L, U] mapped linearly
(``task="regression"``), prediction wᵀx mapped back and clipped to [L, U] by the service):

    F(w) = (1/(2N)) Σ_all (wᵀx − y)² + λ₁‖w‖₁,      N = Σ_k n_k,

with ``regularization`` = λ₁ > 0, the L1 strength (there is no ridge term). Seed 001 writes
½Σ(·)² + λΣ|w_j| (unnormalised): its λ is N·λ₁ here. This is scikit-learn's ``Lasso``
objective with ``alpha`` = λ₁ and no intercept (an intercept is a constant feature).

Round t: the coordinator sends its query point v_t; site k returns
g_k = Σ_{j∈D_k} (v_tᵀx_j − y_j) x_j (+ noise, below); the coordinator steps

    w_{t+1} = S_{zλ₁}(v_t − z·(1/N) Σ_k g_k),   S_τ(a) = sign(a)·max(|a| − τ, 0)

(the soft threshold; seed 001 prints sign(a)(|a| − λ), which is wrong for |a| < λ) with
z = ``step_size``/L and L = 1 ≥ λ_max((1/N)XᵀX) (public: ‖x‖ ≤ 1), so any 0 < z ≤ 1 is a valid
ISTA step. With ``accelerated`` (FISTA, Beck & Teboulle) v_{t+1} = w_{t+1} +
((s_t − 1)/s_{t+1})(w_{t+1} − w_t), s_{t+1} = (1 + √(1 + 4s_t²))/2; otherwise v = w (ISTA).
The default is FISTA without noise and ISTA with noise (momentum accumulates the injected
noise). The released model is w_T.

Without noise (``noise=False``) the shared gradients are exact functions of the data: an
observer who knows all records but one recovers it from one round (seed 001 §4.3.5). It is
**not differentially private**; the service allows it only when every dataset allows
non-private use, charges nothing and labels the model so.

DP variant (``noise=True``, the default; seed 001 §5.1.1's suggested fix). Each per-example
gradient is clipped to norm C (``clip``): ĝ_j = (vᵀx_j − y_j)x_j · min(1, C/‖(vᵀx_j − y_j)x_j‖),
and site k returns the exact grid release of Σ_j ĝ_j + Z, Z ~ N(0, σ_k² I_d), in every round.
The argument — sensitivity 2C exactly and Δ_k = 2C + 2E(n_k) as computed in doubles at every
query point, each site's own σ_k = σ·Δ_k/(2C) kept out of the record (it depends on n_k), the
exact lattice release, adaptive zCDP composition of the T rounds (ρ = Tρ₁) and the conversion
``zcdp_conversion`` (``"cks"``, the default, or ``"bun_steinke"``) — is the one of
:mod:`service.dp.federated.gaussian_rounds`, which PSGD's answers share. The coordinator's
ISTA/FISTA steps in doubles are post-processing. σ = 2C/√(2ρ/T); each site is charged
(ε(Tρ₁, δ), δ) ≤ (ε, δ).

Numeric labels. Nothing above reads the range of y: the step bound L = 1 is a bound on
λ_max((1/N)XᵀX), from ‖x‖ ≤ 1 alone, and the clip makes every released term
ĝ_j = â_j x_j have ‖ĝ_j‖ < C whatever the residual a_j = vᵀx_j − y_j is
(:mod:`service.dp.data.clipping`, step 2), so replacing one row (x, y) by (x′, y′) moves the
exact sum by ‖ĝ − ĝ′‖ ≤ ‖ĝ‖ + ‖ĝ′‖ < 2C for any labels, and the floating-point margin E(n_k)
depends on n_k, d and C only. A regression fit over y ∈ [−1, 1] therefore has exactly the
binary fit's calibration (the same σ, ρ and cost). |y| ≤ 1 matters only for utility: the
unclipped gradient has norm ≤ |vᵀx| + 1 ≤ ‖v‖ + 1, so near a small iterate the default
C = 1 clips little more than it does for ±1 labels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np

from service.dp.core.accounting import PrivacyCost
from service.dp.core.plan import Plan, plan_kind
from service.dp.core.validation import (
    PrivacyParameterError,
    check_known_params,
    positive_float_param,
)
from service.dp.data import clipping
from service.dp.federated._common import (
    FederatedCalibration,
    FederatedProblem,
    FloatArray,
    RoundClock,
    Site,
    bool_param,
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
    max_rho,
    site_plan,
)
from service.dp.federated.protocol import Coordinator, FederatedProtocol, run_rounds

__all__ = [
    "CONVERSIONS",
    "DEFAULT_ITERATIONS",
    "NAME",
    "PROTOCOL",
    "LassoPlan",
    "LassoSite",
    "calibrate",
    "coordinate",
    "max_rho",
    "party",
    "run",
    "run_parties",
    "soft_threshold",
]

NAME = "distributed_lasso"
ALLOWED_PARAMS = (
    "noise",
    "iterations",
    "step_size",
    "accelerated",
    "clip",
    "zcdp_conversion",
)
#: 200 rounds: FISTA's O(1/t²) rate on the noise-free problem; with noise every round costs
#: budget (σ grows like √T), so the caller should lower it for small ε.
DEFAULT_ITERATIONS = 200
MAX_ITERATIONS = 100_000


class LassoSite(Site):
    """Site k: returns the (optionally clipped and noised) gradient sum of its squared loss."""

    _caps: dict[float, FloatArray] | None = None
    _noise: NoiseStream | None = None

    def gradient_sum(
        self,
        w: FloatArray,
        *,
        clip: float | None,
        sigma: float | None,
        rng: np.random.Generator | None,
    ) -> FloatArray:
        """Σ_j (wᵀx_j − y_j) x_j, each term clipped to norm below ``clip`` (module docstring),
        released exactly on the 2⁻³² grid with N(0, σ²I) noise when ``sigma`` is given."""
        residual = self._X @ w - self._y
        if clip is None:
            if sigma is not None:
                raise ValueError("noisy gradient sums need a clip bound")
            exact: FloatArray = self._X.T @ residual
            return self._send(exact)
        if self._caps is None:
            self._caps = {}
        if clip not in self._caps:  # once per site and clip bound: the rows do not change
            self._caps[clip] = clipping.clip_caps(clipping.row_norm_bounds(self._X), clip)
        grad = clipping.clipped_sum(residual, self._X, self._caps[clip])
        if sigma is not None:
            grad = self._noisy(grad, sigma, rng)
        return self._send(grad)

    def _noisy(self, grad: FloatArray, sigma: float, rng: np.random.Generator | None) -> FloatArray:
        """The exact grid release of grad + N(0, σ²I) (:class:`NoiseStream`)."""
        if self._noise is None:
            self._noise = NoiseStream(self.d)
        return self._noise.release(grad, sigma, rng)


class GradientSharer(Protocol):
    """What the coordinator may ask a Lasso site."""

    index: int

    def gradient_sum(
        self,
        w: FloatArray,
        *,
        clip: float | None,
        sigma: float | None,
        rng: np.random.Generator | None,
    ) -> FloatArray: ...


def soft_threshold(a: FloatArray, tau: float) -> FloatArray:
    """S_τ(a) = sign(a)·max(|a| − τ, 0), elementwise."""
    out: FloatArray = np.sign(a) * np.maximum(np.abs(a) - tau, 0.0)
    return out


@plan_kind("federated.distributed_lasso")
@dataclass(frozen=True, slots=True)
class LassoPlan(Plan):
    """What the Lasso's calibration fixed (module docstring): T, the step, FISTA or ISTA and, for
    the DP variant (``noise`` not None), the clip C, the Gaussian rounds and each site's σ_k."""

    sizes: tuple[int, ...]
    d: int
    l1: float
    iterations: int
    step_size: float
    accelerated: bool
    #: None for the variant without noise (not DP)
    noise: RoundsPlan | None
    epsilon: float | None
    delta: float
    clip: float | None
    #: each site's Gaussian answers (empty without noise)
    sites: tuple[GaussianSitePlan, ...]

    def record(self) -> dict[str, Any]:
        """The calibration's ``details``: every number under the papers' names."""
        details: dict[str, Any] = {
            "protocol": NAME,
            "K": len(self.sizes),
            "N": sum(self.sizes),
            "d": self.d,
            "loss": "squared",
            "l1": finite(self.l1),
            "iterations": self.iterations,
            "step_size": finite(self.step_size),
            "accelerated": self.accelerated,
            "noise": self.noise is not None,
            "sites": [{"n": n} for n in self.sizes],
        }
        if self.noise is None or self.clip is None or self.epsilon is None:
            details.update(epsilon=None, delta=0.0, guarantee="none", clip=None, sigma=None)
            return details
        rounds = self.noise
        # each site's own σ_k for the sensitivity of its sum as computed in doubles (hidden
        # with the site sizes: the margin is a function of n_k)
        details["sites"] = [site.record() for site in self.sites]
        details.update(
            epsilon=finite(self.epsilon),
            delta=finite(self.delta),
            clip=finite(self.clip),
            clip_applied=math.nextafter(self.clip, 0.0),
            sensitivity=finite(rounds.sensitivity),
            zcdp_conversion=rounds.zcdp_conversion,
            rho_per_round=finite(rounds.rho_per_round),
            rho_total=finite(rounds.rho_total),
            sigma=finite(rounds.sigma),
            epsilon_spent=finite(rounds.epsilon_spent),
            epsilon_bun_steinke=finite(rounds.epsilon_bun_steinke),
            expected_noise_norm_per_site=finite(rounds.sigma * math.sqrt(self.d)),
            float_margin_note=FLOAT_MARGIN_NOTE,
            release=GRADIENT_RELEASE,
        )
        return details


def calibrate(problem: FederatedProblem) -> FederatedCalibration:
    """Step, rounds, and for the DP variant σ from the zCDP budget (module docstring)."""
    params = problem.params
    check_known_params(params, ALLOWED_PARAMS, NAME)
    noisy = bool_param(params, "noise", True)
    T = int_param(params, "iterations", DEFAULT_ITERATIONS, minimum=1, maximum=MAX_ITERATIONS)
    step = positive_float_param(params, "step_size", 1.0)
    if step > 1.0:
        raise PrivacyParameterError(
            f"step_size must be ≤ 1 (the public bound on the squared loss's curvature is 1 "
            f"for rows of norm ≤ 1), got {step!r}"
        )
    accelerated = bool_param(params, "accelerated", not noisy)
    d, lam1 = problem.d, problem.regularization
    if not noisy:
        for key in ("clip", "zcdp_conversion"):
            if key in params:
                raise PrivacyParameterError(f"{key} applies only with noise=true")
        plan = LassoPlan(
            sizes=problem.site_sizes,
            d=d,
            l1=lam1,
            iterations=T,
            step_size=step,
            accelerated=accelerated,
            noise=None,
            epsilon=None,
            delta=0.0,
            clip=None,
            sites=(),
        )
        return FederatedCalibration(
            protocol=NAME,
            site_costs=tuple(PrivacyCost(0.0, 0.0) for _ in problem.site_sizes),
            private=False,
            details=plan.record(),
            composition=(
                f"no differential privacy: the sites share their exact squared-loss gradients "
                f"in each of {T} rounds"
            ),
            rounds=T,
            notes=(
                "not differentially private: exact gradients are shared (Li et al. distributed "
                "Lasso without noise); allowed only when every dataset allows non-private use",
            ),
            plan=plan,
        )
    if not problem.delta > 0.0:
        raise PrivacyParameterError(
            f"{NAME} with noise is (ε, δ)-DP (Gaussian noise, zCDP) and needs 0 < delta < 1; "
            f"got delta = {problem.delta!r}"
        )
    clip = positive_float_param(params, "clip", 1.0)
    conversion = choice_param(params, "zcdp_conversion", "cks", CONVERSIONS)
    eps, delta = problem.epsilon, problem.delta
    rounds = calibrate_rounds(eps, delta, rounds=T, clip=clip, conversion=conversion)
    sigma, sensitivity, achieved = rounds.sigma, rounds.sensitivity, rounds.achieved
    rho_round, rho_total = rounds.rho_per_round, rounds.rho_total
    plan = LassoPlan(
        sizes=problem.site_sizes,
        d=d,
        l1=lam1,
        iterations=T,
        step_size=step,
        accelerated=accelerated,
        noise=rounds.plan(conversion),
        epsilon=eps,
        delta=delta,
        clip=clip,
        sites=tuple(site_plan(n, d, clip, sigma) for n in problem.site_sizes),
    )
    return FederatedCalibration(
        protocol=NAME,
        site_costs=tuple(achieved for _ in problem.site_sizes),
        private=True,
        details=plan.record(),
        composition=(
            f"{T} rounds, each a Gaussian mechanism on the site's clipped gradient sum "
            f"(sensitivity 2C = {sensitivity:g}, σ = {sigma:.6g}; each site scales its σ by its "
            f"sum's floating-point margin, keeping ρ), released exactly on the 2^-32 grid: "
            f"ρ = {rho_round:.6g} per round, "
            f"{rho_total:.6g} in total by zCDP composition, converted to {achieved} "
            f"({'Canonne–Kamath–Steinke' if conversion == 'cks' else 'Bun–Steinke'}) per dataset"
        ),
        rounds=T,
        notes=(
            "the sites' noisy gradients are treated as released in every round; the model is "
            "post-processing of them",
        ),
        plan=plan,
    )


class _Coordinator(Coordinator):
    """ISTA/FISTA on the sum of the sites' answers; sees only those answers. ``sigmas[k]``
    is site k's noise scale (None: no noise)."""

    def __init__(
        self,
        *,
        total: int,
        d: int,
        l1: float,
        step: float,
        iterations: int,
        accelerated: bool,
        clip: float | None,
        sigmas: Sequence[float] | None,
    ) -> None:
        super().__init__(iterations)
        self._total, self._d, self._l1, self._step = total, d, l1, step
        self._accelerated, self._clip = accelerated, clip
        self._sigmas = None if sigmas is None else list(sigmas)
        self._w = np.zeros(d)
        self._query = self._w.copy()
        self._s = 1.0

    def ask(self, t: int, k: int, party: GradientSharer, rng: np.random.Generator | None) -> Any:
        del t
        sigma = None if self._sigmas is None else self._sigmas[k]
        return party.gradient_sum(self._query, clip=self._clip, sigma=sigma, rng=rng)

    def combine(self, t: int, answers: list[Any], parties: Sequence[Any]) -> None:
        del t, parties
        total = np.zeros(self._d)
        for answer in answers:  # every site at once; summed in site order afterwards
            total += answer
        step, query = self._step, self._query
        w_next = soft_threshold(query - step * total / self._total, step * self._l1)
        if self._accelerated:
            s = self._s
            s_next = (1.0 + math.sqrt(1.0 + 4.0 * s * s)) / 2.0
            self._query = w_next + ((s - 1.0) / s_next) * (w_next - self._w)
            self._s = s_next
        else:
            self._query = w_next
        self._w = w_next

    def result(self, rng: np.random.Generator | None) -> FloatArray:
        del rng
        return self._w


class DistributedLasso(FederatedProtocol[LassoPlan]):
    """The Lasso's own steps within the shared skeleton (:mod:`.protocol`)."""

    name = NAME
    plan_type = LassoPlan
    steps = ("gradient_sum",)

    def calibrate(self, problem: FederatedProblem) -> FederatedCalibration:
        return calibrate(problem)

    def party(
        self, problem: FederatedProblem, plan: LassoPlan, index: int, X: FloatArray, y: FloatArray
    ) -> LassoSite:
        """The Lasso site needs nothing of the problem or plan beyond its rows."""
        del problem, plan
        return LassoSite(index, X, y)

    def coordinator(self, problem: FederatedProblem, plan: LassoPlan) -> Coordinator:
        del problem
        noisy = plan.noise is not None
        return _Coordinator(
            total=sum(plan.sizes),
            d=plan.d,
            l1=plan.l1,
            step=plan.step_size,
            iterations=plan.iterations,
            accelerated=plan.accelerated,
            clip=plan.clip if noisy else None,
            sigmas=[site.sigma for site in plan.sites] if noisy else None,
        )

    def perform(
        self,
        site: Any,
        plan: LassoPlan,
        step: str,
        points: list[FloatArray],
        rng: np.random.Generator | None,
    ) -> FloatArray | None:
        del step  # the Lasso's one step
        assert isinstance(site, LassoSite)
        (point,) = exactly(points, 1)
        noisy = plan.noise is not None
        return site.gradient_sum(
            point,
            clip=plan.clip if noisy else None,
            # the party's own σ_k: σ scaled by its sum's floating-point margin (gaussian_rounds)
            sigma=plan.sites[site.index].sigma if noisy else None,
            rng=rng,
        )


PROTOCOL: Final[DistributedLasso] = DistributedLasso()


def coordinate(
    sites: Sequence[GradientSharer],
    *,
    total: int,
    d: int,
    l1: float,
    step: float,
    iterations: int,
    accelerated: bool,
    clip: float | None,
    sigmas: Sequence[float] | None,
    rng: np.random.Generator | None,
    clock: RoundClock,
) -> FloatArray:
    """ISTA/FISTA on the sum of the sites' answers; sees only those answers. ``sigmas[k]``
    is site k's noise scale (None: no noise)."""
    coordinator = _Coordinator(
        total=total,
        d=d,
        l1=l1,
        step=step,
        iterations=iterations,
        accelerated=accelerated,
        clip=clip,
        sigmas=sigmas,
    )
    return run_rounds(coordinator, sites, rng=rng, clock=clock)


#: Site ``index`` of a fit, holding (X, y): the in-process fit and a node build it alike.
party = PROTOCOL.local_party
#: ISTA/FISTA over local :class:`LassoSite` objects or proxies of sites on nodes.
run_parties = PROTOCOL.run_parties
run = PROTOCOL.run
