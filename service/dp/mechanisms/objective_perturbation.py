"""``objective_perturbation``: ε-DP by minimising a randomly tilted objective.

Chaudhuri, Monteleoni & Sarwate 2011 (CMS11) Alg. 2 / Thm 9, via seed 000 Alg. 2 and
seed 003 Alg. 1 (PLR). Requirements: l convex, twice differentiable (a.e. with the Huber
corollary of CMS11), |l′| ≤ 1, 0 ≤ l″ ≤ c; ‖x_i‖ ≤ 1; y_i ∈ {−1, +1}; λ > 0.

Calibration (public n, λ, ε, c; the tight Jacobian bound and the no-cliff choice of Δ of
:func:`service.dp.mechanisms._common.jacobian_slack`):

    ε_J(Δ) = ln(1 + c/(n(λ + Δ)))
    Δ = 0                                   if ln(1 + c/(nλ)) ≤ ε/2
    Δ = c/(n(e^{ε/2} − 1)) − λ  (> 0)        otherwise
    ε′ = ε − ε_J(Δ),   β = ε′/2,   b ~ ν(b) ∝ exp(−β‖b‖)   (‖b‖ ~ Gamma(d, 2/ε′))
    release w_priv = argmin_w J(w) + bᵀw/n + (Δ/2)‖w‖²,  J(w) = (1/n)Σ l(y_i wᵀx_i) + (λ/2)‖w‖²

Privacy argument (CMS11 Thm 9 with the determinant lemma). The first-order condition gives a
bijection b = b_D(w) = −n∇[J + (Δ/2)‖·‖²](w) = −Σ_i l′(y_i wᵀx_i) y_i x_i − n(λ + Δ) w, so
the density of w_priv is p_D(w) = ν(b_D(w)) |det ∇b_D(w)|. For neighbours differing in
record i:

* noise part: ‖b_D(w) − b_D′(w)‖ = ‖l′(·)y x − l′(·)y′x′‖ ≤ 2, so
  ν(b_D)/ν(b_D′) ≤ e^{2β} = e^{ε′};
* Jacobian part: ∇b_D = −(M + uuᵀ) with M = Σ_{j≠i} l″_j x_j x_jᵀ + n(λ + Δ)I common to
  D and D′ and u = √l″_i x_i (‖u‖² ≤ c); the matrix determinant lemma gives
  |det ∇b_D′|/|det ∇b_D| = (1 + vᵀM⁻¹v)/(1 + uᵀM⁻¹u) ≤ 1 + c/(n(λ + Δ)) = e^{ε_J}.
  (CMS11 Lemma 10 squares this factor: it bounds a general rank-2 perturbation; PrivFit's
  neighbours replace one record of a linear model, where the rank-1 lemma applies twice.)

The privacy loss is at most ε′ + ε_J = ε. Δ is chosen so that ε′ is the larger of the two
candidates ε − ln(1 + c/(nλ)) (Δ = 0) and ε/2 (ε_J = ε/2): the noise never falls below half
the budget, and there is no cliff near the threshold (CMS11's literal rule, with its squared
Jacobian, left ε′ ≈ 0 just above 2 ln(1 + c/(nλ)) = ε: at n = 789, λ = 0.01, Huber h = 0.5,
ε = 0.24 it had ε′ = 0.0013 where this rule has 0.1207, 90× less noise).

Release in floating point (issue 19 §1): the argument above is about the exact minimiser
for a real b; PrivFit runs it at ε₁ = ε − ε_r (``epsilon_objective``) and releases the
certified minimiser of :mod:`service.dp.optimize.certified` (``certified_release``): (ε₁ + ε_r)-DP
for the released doubles.

When the certificate can fail (issue 25 §3; ``certificate_failure``). A double meeting τ
exists whenever ‖b‖ ≤ T = n·q*(1 − 2ρ_b), q* the largest ‖b̂‖/n with
:func:`service.dp.optimize.certified_failure.certificate_floor` ≤ τ (public: n, d, the loss, λ + Δ,
τ). ‖b‖ exceeds T with probability p ≤ Q(d, βT) (Gamma(d, 1/β) tail), recorded as
``log10_probability_bound``: below 10⁻⁴⁵ for every (n ≥ 10, d, λ, ε) sampled in
tests/unit/dp/test_certified_stopping.py, usually 10⁻¹⁰⁰⁰ or less. Calibration refuses
(422, before any charge) a request with no such T (the Huber loss with d ≤ 3 and λ + Δ ≲ 10⁻⁵:
the per-row rounding of the Huber derivative, ∝ u·c‖w‖, is then not covered by τ) or with
p > 10⁻³⁰. p is not added to δ: the mechanism stays ε-DP for the runs that release, and
counting failures it is (ε, p)-DP with p fifteen orders below the ledger's smallest δ unit.
Below T a failure needs the solver not to converge (docs/privacy.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.dp.core.base import Calibration, FittedModel, Problem, ProgressCallback
from service.dp.core.losses import get_loss
from service.dp.core.options import Capabilities, MechanismOptions
from service.dp.mechanisms._common import (
    base_details,
    certificate_failure,
    certified_minimiser,
    check_common,
    jacobian_slack,
    release,
    report,
    require_smooth_loss,
)
from service.dp.noise.rounding import norm_up
from service.dp.optimize import certified, certified_failure

__all__ = [
    "CAPABILITIES",
    "MECHANISM",
    "ObjectivePerturbation",
    "Options",
    "run_certified",
    "with_centre",
]


# ---- options and capabilities (service.dp.core.options) ---------------------------------


@dataclass(frozen=True, slots=True)
class Options(MechanismOptions):
    """Objective perturbation has no options of its own (only the loss's `h`)."""


def excess_risk_terms(
    details: Mapping[str, Any], expected_noise_norm: float | None
) -> tuple[float, float] | None:
    """The planner's terms (:mod:`service.dp.analysis.planning`): the shift is the
    calibration's ``expected_coef_shift_bound`` E‖b‖/(n(λ + Δ)), the smoothness c + λ + Δ
    (``effective_regularization``)."""
    if expected_noise_norm is None:
        return None
    shift = float(details.get("expected_coef_shift_bound", math.nan))
    lam = float(details.get("effective_regularization", details["regularization"]))
    return shift, float(details["c"]) + lam


CAPABILITIES = Capabilities(excess_risk=excess_risk_terms, meta_level=True)


class ObjectivePerturbation:
    """ε-DP objective perturbation (CMS11 Alg. 2)."""

    name = "objective_perturbation"
    options = Options
    capabilities = CAPABILITIES

    def validate_params(self, problem: Problem) -> Problem:
        loss = check_common(problem, ())
        require_smooth_loss(loss, self.name)
        return problem

    def calibrate(self, problem: Problem) -> Calibration:
        loss = check_common(problem, ())
        require_smooth_loss(loss, self.name)
        n, d, lam, eps, c = problem.n, problem.d, problem.regularization, problem.epsilon, loss.c

        def public(budget: float) -> tuple[float, float]:
            extra, noise_budget, _ = jacobian_slack(budget, lam, n, c)
            return lam + extra, certified.norm_exponential_quantile(d, noise_budget / 2.0) / n

        eps_objective, certificate = certified.split(eps, n=n, d=d, c=c, public=public)
        extra, epsilon_prime, jacobian_epsilon = jacobian_slack(eps_objective, lam, n, c)
        branch = "no_extra_regularization" if extra == 0.0 else "extra_regularization"
        beta = epsilon_prime / 2.0
        effective = lam + extra
        expected = d / beta
        details = base_details(problem, loss)
        details.update(
            delta=0.0,
            noise="norm_exponential",
            branch=branch,
            epsilon_objective=eps_objective,
            epsilon_prime=epsilon_prime,
            Delta=extra,
            effective_regularization=effective,
            beta=beta,
            gradient_sensitivity=2.0,
            noise_epsilon=2.0 * beta,
            jacobian_epsilon=jacobian_epsilon,
            noise_norm_distribution=f"Gamma(shape={d}, scale={1.0 / beta!r})",
            expected_noise_norm=expected,
            expected_coef_shift_bound=expected / (n * effective),
        )
        details.update(certificate.details())
        failure = certificate_failure(problem, loss, details, certificate, mechanism=self.name)
        details.update(failure)
        return Calibration(
            epsilon=float(eps),
            delta=0.0,
            details=details,
            expected_noise_norm=expected,
            composition=(
                f"single release, ε = {eps:g} = noise part ε′ = {epsilon_prime:.6g} + Jacobian "
                f"part ln(1 + c/(n(λ+Δ))) = {jacobian_epsilon:.6g} (Chaudhuri et al. 2011, "
                f"Alg. 2 with the determinant lemma, "
                f"{'Δ = 0' if extra == 0.0 else f'Δ = {extra:.6g}'}) + release part "
                f"ε_r = {certificate.epsilon:.6g}: {certificate.describe()}; no δ is spent. "
                f"{certified_failure.failure_sentence(failure)}"
            ),
        )

    def run(
        self,
        X: NDArray[np.float64],
        y: NDArray[np.float64],
        problem: Problem,
        calibration: Calibration,
        *,
        rng: np.random.Generator | None,
        progress: ProgressCallback | None,
    ) -> FittedModel:
        loss = check_common(problem, ())
        require_smooth_loss(loss, self.name)
        report(progress, 0.0)
        model = release(run_certified(X, y, problem, calibration, rng=rng))
        report(progress, 1.0)
        return model


def with_centre(
    calibration: Calibration, centre: NDArray[np.float64], centre_weight: float
) -> Calibration:
    """The calibration for an objective with the public term (η/2)‖w − w₀‖² (transfer
    learning, PST-H; η already counted in its strong convexity): the certificate's public
    bound L grows by η‖w₀‖, which only enlarges τ and the release noise (same ε_r); the
    ``certificate_failure`` record is recomputed with the centre (it is not refused here: the
    centre is known only when the fit runs)."""
    plan = certified.CertifiedRelease.from_details(calibration.details)
    shift = centre_weight * norm_up(centre)
    plan = plan.with_linear_bound(plan.linear_bound + shift)
    details = dict(calibration.details)
    details.update(plan.details())
    if "certificate_failure" in details:  # the same record, for the centred objective
        d = int(details["d"])
        failure = certified_failure.failure_details(
            n=int(details["n"]),
            d=d,
            loss=get_loss(str(details["loss"]), h=float(details.get("huber_h", 0.5))),
            strong_convexity=plan.strong_convexity,
            tolerance=plan.tolerance,
            centre_norm=shift,
            log10_tail=partial(
                certified_failure.norm_exponential_tail_log10, d, float(details["beta"])
            ),
        )
        details.update(failure)
    return replace(calibration, details=details)


def run_certified(
    X: NDArray[np.float64],
    y: NDArray[np.float64],
    problem: Problem,
    calibration: Calibration,
    *,
    rng: np.random.Generator | None,
    centre: NDArray[np.float64] | None = None,
    centre_weight: float = 0.0,
) -> NDArray[np.float64]:
    """The certified release of ``argmin J + bᵀw/n + (Δ/2)‖w‖² + (η/2)‖w − w₀‖²`` with the
    noise β, Δ and release plan of an objective-perturbation ``calibration``
    (:mod:`service.dp.optimize.certified`; with a centre w₀, pass the calibration through
    :func:`with_centre`)."""
    loss = check_common(problem, ())
    require_smooth_loss(loss, ObjectivePerturbation.name)
    return certified_minimiser(
        X, y, loss, problem, calibration, rng=rng, centre=centre, centre_weight=centre_weight
    )


MECHANISM = ObjectivePerturbation()
