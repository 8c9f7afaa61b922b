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

Random projection (optional ``projection_dim`` k ≤ d, binary fits; seed 001 §2.4). Each row
is mapped to z_i = clip(Rx_i) by a public k × d matrix R (Gaussian N(0, 1/k) or Achlioptas
entries, :mod:`service.dp.data.projection`) generated from ``projection_seed``, which is chosen
before and independently of the data (given, or drawn from the CSPRNG / the test rng when the
fit runs); clip scales a row with ‖Rx‖ > 1 to the unit ball and the exactness step of
:func:`~service.dp.core.validation.validate_design` then makes ‖z_i‖ ≤ 1 hold exactly. The map
x ↦ z is fixed, public and applied to each record alone, so replace-one neighbours D, D′ map to
replace-one neighbours Z, Z′ with rows in the unit ball and labels unchanged: every step of the
argument above holds verbatim for the problem in ℝ^k, with k in place of d — b ∈ ℝ^k with
‖b‖ ~ Gamma(k, 2/ε′) (the same β = ε′/2: S_g = 2 and c do not depend on the dimension), the
certified release's τ and its rounding terms, and the failure bound Q(k, βT). The released
v ∈ ℝ^k is folded to coef = Rᵀv (post-processing), so the model scores original rows:
coefᵀx = vᵀ(Rx). The training rows were clipped after the projection (a positive rescaling
of each row with ‖Rx‖ > 1), which leaves every predicted label sign(vᵀRx) unchanged but not
the magnitude of the score of such a row. Refused (422, before any charge): multi-class and
regression fits (their noise and certificates are those of ℝ^{dK} and of the residual loss,
not folded here), k > d, and every objective with a public centre (transfer, PST-H: the centre
lives in ℝ^d).

Regression (``task="regression"``, the Huber loss ℓ of the residual r = y − wᵀx with width h,
y ∈ [−1, 1]; :mod:`service.dp.core.regression_losses`). The objective is
J(w) = (1/n)Σ ℓ(y_i − wᵀx_i) + (λ/2)‖w‖², and the first-order condition gives
b_D(w) = Σ_i ψ(r_i) x_i − n(λ + Δ)w with ψ = ℓ′ = clip(·, −h, h). So
‖b_D(w) − b_D′(w)‖ = ‖ψ(r)x − ψ(r′)x′‖ ≤ 2h: the noise rate is β = ε′/(2h) (ν(b_D)/ν(b_D′)
≤ e^{2hβ} = e^{ε′}). ∇b_D = −(Σ_j ℓ″(r_j)x_j x_jᵀ + n(λ + Δ)I) has the same rank-one structure
with ‖u‖² = ℓ″(r_i)‖x_i‖² ≤ c = 1, so the Jacobian part and the choice of Δ are
:func:`~service.dp.mechanisms._common.jacobian_slack` with c = 1 (ℓ″ jumps at |r| = h, the case
of CMS11's Huber corollary, as for the binary Huber loss). The certified release and when it can
fail are :mod:`service.dp.optimize.regression`'s (|ψ| ≤ h in place of |l′| ≤ 1; τ's public
scale is h + L for h > 1). On a grid of requests (n from 10 to 10⁵, d from 1 to 100, λ from
10⁻⁸ to 1, ε from 10⁻³ to 100, h ∈ {0.1, 0.5, 2}) the failure bound is below 10⁻³¹ and four are
refused, all at λ = 10⁻⁸, ε = 100, h = 2, d ≤ 3 (the residuals' rounding at ‖w‖ ≈ h/λ, as for
the binary Huber loss with few features and a tiny λ). The squared loss has no bound on ℓ′ for
every w and is refused (``adassp`` fits it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from service.dp.core.base import Calibration, FittedModel, Problem, ProgressCallback
from service.dp.core.options import Capabilities, MechanismOptions, option
from service.dp.core.plan import plan_kind
from service.dp.core.regression_losses import RegressionHuberLoss
from service.dp.core.validation import PrivacyParameterError, validate_design
from service.dp.data.projection import ProjectionKind, RandomProjection
from service.dp.mechanisms import multiclass
from service.dp.mechanisms._common import (
    MAX_PROJECTION_DIM,
    PROJECTION_PARAMS,
    SOLVE_PASSES,
    Inputs,
    NormExponentialObjectivePlan,
    certificate_failure,
    certified_minimiser,
    check_common,
    jacobian_slack,
    noise_enclosure,
    problem_loss,
    projection_kind_option,
    projection_params,
    projection_seed_option,
    release,
    report,
    require_plan,
    require_smooth_loss,
)
from service.dp.noise.rounding import norm_up
from service.dp.optimize import certified, certified_failure, regression

__all__ = [
    "CAPABILITIES",
    "MECHANISM",
    "ObjectivePerturbation",
    "ObjectivePerturbationPlan",
    "Options",
    "centred_plan",
    "regression_plan",
    "rule_dimension",
    "run_certified",
    "run_regression",
    "with_centre",
]


@plan_kind("objective_perturbation")
@dataclass(frozen=True, slots=True)
class ObjectivePerturbationPlan(NormExponentialObjectivePlan):
    """Objective perturbation's plan (module docstring): the norm-exponential noise rate
    β = ε′/2 with ε′ = ε₁ − ε_J, Δ, λ + Δ, the split ε = ε₁ + ε_r and the certified
    release; with ``projection_dim`` k the public projection's kind and seed (None: drawn
    when the fit runs), and b, the certificate and its failure bound live in ℝ^k."""

    mechanism = "objective_perturbation"

    projection_dim: int | None = None
    projection_kind: ProjectionKind | None = None
    projection_seed: int | None = None

    @property
    def dimension(self) -> int:
        """The dimension of b and of the objective solved: k with a projection, else d."""
        return self.inputs.d if self.projection_dim is None else self.projection_dim

    def details(self) -> dict[str, Any]:
        """The record (:class:`NormExponentialObjectivePlan`); a projected fit adds
        ``noise_dimension`` = k and the projection's options."""
        details = NormExponentialObjectivePlan.details(self)
        if self.projection_dim is not None:
            details.update(
                noise_dimension=self.dimension,
                projection_dim=self.projection_dim,
                projection_kind=self.projection_kind,
                projection_seed=self.projection_seed,
            )
        return details

    def projection(self, rng: np.random.Generator | None) -> RandomProjection | None:
        """The public projection R (None without ``projection_dim``): from the plan's seed, or
        with a seed drawn now (CSPRNG, or ``rng`` in test mode), before any data is read."""
        if self.projection_dim is None:
            return None
        kind: ProjectionKind = self.projection_kind or "gaussian"
        d, k = self.inputs.d, self.projection_dim
        if self.projection_seed is None:
            return RandomProjection.create(d, k, kind=kind, rng=rng)
        return RandomProjection(d, k, self.projection_seed, kind)

    @property
    def gradient_sensitivity(self) -> float:
        """2, or 2h for Huber regression (|ψ| ≤ h: the gradient moves by 2h)."""
        if self.inputs.task == "regression":
            return 2.0 * self.inputs.huber_h
        return 2.0

    def calibration(self) -> Calibration:
        eps, extra = self.inputs.epsilon, self.Delta
        return self.calibration_with(
            f"single release, ε = {eps:g} = noise part ε′ = {self.epsilon_prime:.6g} + "
            f"Jacobian part ln(1 + c/(n(λ+Δ))) = {self.jacobian_epsilon:.6g} (Chaudhuri et "
            f"al. 2011, Alg. 2 with the determinant lemma, "
            f"{'Δ = 0' if extra == 0.0 else f'Δ = {extra:.6g}'}) + release part "
            f"ε_r = {self.certificate.epsilon:.6g}: {self.certificate.describe()}; no δ is "
            f"spent. {certified_failure.failure_sentence(self.failure.details())}"
        )


# ---- options and capabilities (service.dp.core.options) ---------------------------------


@dataclass(frozen=True, slots=True)
class Options(MechanismOptions):
    """Objective perturbation's options (besides the loss's `h`): an optional public random
    projection of the rows, for binary fits; `projection_kind` and `projection_seed` only with
    `projection_dim`, which may not exceed the number of features d."""

    projection_dim: int | None = option(
        None,
        "Dimension k ≤ d of a public random projection of the rows (null: none; binary fits "
        "only); the objective and its noise live in dimension k and the released weights are "
        "folded back to d.",
        ge=1,
        le=MAX_PROJECTION_DIM,
    )
    projection_kind: Literal["gaussian", "achlioptas"] | None = projection_kind_option()
    projection_seed: int | None = projection_seed_option()


#: Why a projection is refused for the other tasks (:func:`projection_params`).
PROJECTION_REFUSED = {
    "multiclass": ": objective_perturbation projects the rows of binary (margin-loss) fits "
    "only; the multinomial objective's noise and certificate live in ℝ^(dK)",
    "regression": ": objective_perturbation projects the rows of binary (margin-loss) fits "
    "only; the Huber regression objective is not folded back",
}


def work_estimate(n: int, d: int, details: Mapping[str, Any]) -> float:
    """Row-feature passes of a fit (:mod:`service.dp.analysis.work`): one certified solve,
    :data:`SOLVE_PASSES` passes over the n × d′ design it solves, d′ = d, or the projection's
    k (``projection_dim``) plus n·d·k for projecting the rows once."""
    k = details.get("projection_dim")
    if k is None:
        return float(SOLVE_PASSES) * n * d
    return float(SOLVE_PASSES) * n * int(k) + float(n) * d * int(k)


def excess_risk_terms(
    details: Mapping[str, Any], expected_noise_norm: float | None
) -> tuple[float, float] | None:
    """The planner's terms (:mod:`service.dp.analysis.planning`): the shift is the
    calibration's ``expected_coef_shift_bound`` E‖b‖/(n(λ + Δ)), the smoothness c + λ + Δ
    (``effective_regularization``). None for a projected fit: its shift bounds the
    projected objective's minimiser in ℝ^k, not J's on the original rows."""
    if expected_noise_norm is None or details.get("projection_dim") is not None:
        return None
    shift = float(details.get("expected_coef_shift_bound", math.nan))
    lam = float(details.get("effective_regularization", details["regularization"]))
    return shift, float(details["c"]) + lam


CAPABILITIES = Capabilities(
    excess_risk=excess_risk_terms,
    meta_level=True,
    tasks=frozenset({"binary", "multiclass", "regression"}),
    work=work_estimate,
)


class ObjectivePerturbation:
    """ε-DP objective perturbation (CMS11 Alg. 2)."""

    name = "objective_perturbation"
    options = Options
    capabilities = CAPABILITIES

    def validate_params(self, problem: Problem) -> Problem:
        loss = check_common(problem, PROJECTION_PARAMS)
        require_smooth_loss(loss, self.name)
        params = projection_params(
            problem.params, task=problem.task, refused=PROJECTION_REFUSED, largest=problem.d
        )
        if params["projection_dim"] is None:
            params = {}  # an unprojected problem's params stay as they always were
        problem = replace(problem, params=params)
        if problem.task == "regression":
            regression_plan(problem)  # refuses the squared loss and infeasible certificates
        return problem

    def calibrate(self, problem: Problem) -> Calibration:
        if problem.task == "multiclass":
            return multiclass.objective_plan(problem, mechanism=self.name).calibration()
        return self.plan(problem).calibration()

    def plan(self, problem: Problem) -> ObjectivePerturbationPlan:
        """The plan of a validated problem (:meth:`validate_params`), from public numbers."""
        if problem.task == "regression":
            return regression_plan(problem)
        loss = problem_loss(problem)
        n, lam, eps, c = problem.n, problem.regularization, problem.epsilon, loss.c
        k = problem.params.get("projection_dim")
        # the dimension of the objective solved, of b and of the certificate: d, or k
        d = problem.d if k is None else int(k)

        def public(budget: float) -> tuple[float, float]:
            extra, noise_budget, _ = jacobian_slack(budget, lam, n, c)
            return lam + extra, certified.norm_exponential_quantile(d, noise_budget / 2.0) / n

        eps_objective, certificate = certified.split(eps, n=n, d=d, c=c, public=public)
        extra, epsilon_prime, jacobian_epsilon = jacobian_slack(eps_objective, lam, n, c)
        beta = epsilon_prime / 2.0
        inputs = Inputs.of(problem)
        plan = ObjectivePerturbationPlan.split(
            inputs,
            extra=extra,
            beta=beta,
            split=(eps_objective, epsilon_prime, jacobian_epsilon),
            certificate=certificate,
            failure=certificate_failure(
                inputs,
                ("norm_exponential", beta, None),
                certificate,
                mechanism=self.name,
                dimension=d,
            ),
        )
        if k is None:
            return plan
        return replace(
            plan,
            projection_dim=int(k),
            projection_kind=problem.params["projection_kind"],
            projection_seed=problem.params["projection_seed"],
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
        del problem  # the plan holds the objective
        if isinstance(calibration.plan, multiclass.MulticlassObjectivePlan):
            return multiclass.run_objective(X, y, calibration.plan, rng=rng, progress=progress)
        plan = require_plan(calibration, ObjectivePerturbationPlan)
        report(progress, 0.0)
        if plan.inputs.task == "regression":
            model = release(run_regression(X, y, plan, rng=rng))
            report(progress, 1.0)
            return model
        projection = plan.projection(rng)
        if projection is None:
            coef = certified_minimiser(
                X, y, plan, regularization=plan.inputs.regularization, rng=rng
            )
        else:
            Z, yz = projected_rows(projection, X, y)
            v = certified_minimiser(Z, yz, plan, regularization=plan.inputs.regularization, rng=rng)
            coef = projection.fold(v)  # Rᵀv: post-processing of the released v
        model = release(coef)
        report(progress, 1.0)
        return model


def projected_rows(
    projection: RandomProjection, X: NDArray[np.float64], y: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(Z, y): every row projected and clipped, z = clip(Rx) (:meth:`RandomProjection.apply`),
    then :func:`~service.dp.core.validation.validate_design`'s exactness step, which shrinks a
    row whose computed norm is within rounding of 1 so that ‖z‖ ≤ 1 holds for the real norm
    (module docstring). A per-record public map; a new array, so nothing a prepared design
    keeps for X is used for Z."""
    return validate_design(projection.apply(X), y)


def _require_unprojected(plan: ObjectivePerturbationPlan, what: str) -> None:
    """Refuse a projected plan where the objective carries a public centre in ℝ^d."""
    if plan.projection_dim is not None:
        raise PrivacyParameterError(
            f"projection_dim is not offered for {what}: the public centre lives in the "
            "original d features, not in the projection's k"
        )


def rule_dimension(mechanism: str, d: int, params: Mapping[str, Any]) -> int:
    """The dimension of the objective a fit of ``mechanism`` with ``params`` solves, for the
    public λ rule (its noise moment E‖b‖² = 4d′(d′ + 1)/ε² is that of b ∈ ℝ^{d′}): the
    projection's k for a projected ``objective_perturbation`` fit, else d. A k that is not a
    valid integer in [1, d] gives d (the fit's own checks refuse it)."""
    k = params.get("projection_dim")
    if mechanism != ObjectivePerturbation.name or isinstance(k, bool) or not isinstance(k, int):
        return d
    return k if 1 <= k <= d else d


def regression_plan(problem: Problem) -> ObjectivePerturbationPlan:
    """The plan for ``task="regression"`` with the Huber loss of width h (module docstring):
    c = 1, β = ε′/(2h), the certified release split as for the margin losses, and when the
    certificate can fail from :func:`service.dp.optimize.regression.failure_plan` (refused,
    422, above 10⁻³⁰ or when no point is certifiable)."""
    loss = problem_loss(problem)
    if not isinstance(loss, RegressionHuberLoss):
        raise PrivacyParameterError(
            "objective_perturbation fits regression with the huber loss only: the squared loss "
            "has no bound on its derivative (use adassp for it)"
        )
    n, d, lam, eps = problem.n, problem.d, problem.regularization, problem.epsilon
    bound, c = float(loss.lipschitz), float(loss.c)

    def public(budget: float) -> tuple[float, float]:
        # τ scales with 1 + L; the gradient's terms are bounded by h + ‖b/n‖, so for h > 1
        # the public L carries h − 1 too (any public τ is valid; this one is reachable)
        extra, noise_budget, _ = jacobian_slack(budget, lam, n, c)
        quantile = certified.norm_exponential_quantile(d, noise_budget / (2.0 * bound))
        return lam + extra, quantile / n + max(0.0, bound - 1.0)

    eps_objective, certificate = certified.split(eps, n=n, d=d, c=c, public=public)
    extra, epsilon_prime, jacobian_epsilon = jacobian_slack(eps_objective, lam, n, c)
    beta = epsilon_prime / (2.0 * bound)
    failure = regression.failure_plan(
        n=n,
        d=d,
        loss=loss,
        strong_convexity=certificate.strong_convexity,
        tolerance=certificate.tolerance,
        log10_tail=partial(certified_failure.norm_exponential_tail_log10, d, beta),
    )
    if failure.noise_norm_threshold < 0.0:
        raise PrivacyParameterError(
            "objective_perturbation: with these public parameters no minimiser can be certified "
            "to the tolerance its release assumes (rounding of the residuals at large "
            "coefficients); use a larger regularization or a smaller Huber width h"
        )
    certified_failure.check_failure_probability(failure.details(), ObjectivePerturbation.name)
    return ObjectivePerturbationPlan.split(
        Inputs.of(problem),
        extra=extra,
        beta=beta,
        split=(eps_objective, epsilon_prime, jacobian_epsilon),
        certificate=certificate,
        failure=failure,
    )


def run_regression(
    X: NDArray[np.float64],
    y: NDArray[np.float64],
    plan: ObjectivePerturbationPlan,
    *,
    rng: np.random.Generator | None,
) -> NDArray[np.float64]:
    """The certified release of argmin J + bᵀw/n + (Δ/2)‖w‖² for the regression plan."""
    loss = plan.inputs.loss_function()
    if not isinstance(loss, RegressionHuberLoss):  # pragma: no cover - the plan decides
        raise TypeError("a regression plan of objective_perturbation names the huber loss")
    return regression.release_regression_minimiser(
        X,
        y,
        loss,
        regularization=plan.inputs.regularization,
        extra_regularization=plan.Delta,
        noise=noise_enclosure(plan, rng),
        release=plan.certificate,
        rng=rng,
    )


def centred_plan(
    plan: ObjectivePerturbationPlan, centre: NDArray[np.float64], centre_weight: float
) -> ObjectivePerturbationPlan:
    """The plan for an objective with the public term (η/2)‖w − w₀‖² (transfer learning,
    PST-H; η already counted in its strong convexity): the certificate's public bound L grows
    by η‖w₀‖, which only enlarges τ and the release noise (same ε_r), and when the
    certificate can fail is recomputed with the centre (not refused here: the centre is known
    only when the fit runs). A projected plan is refused."""
    _require_unprojected(plan, "objectives with a public centre (transfer)")
    shift = centre_weight * norm_up(centre)
    certificate = plan.certificate.with_linear_bound(plan.certificate.linear_bound + shift)
    failure = certificate_failure(
        plan.inputs,
        (plan.noise, plan.beta, plan.sigma),
        certificate,
        mechanism=ObjectivePerturbation.name,
        centre_norm=shift,
        check=False,
    )
    return replace(plan, certificate=certificate, failure=failure)


def with_centre(
    calibration: Calibration, centre: NDArray[np.float64], centre_weight: float
) -> Calibration:
    """The calibration of :func:`centred_plan`: the record is the old one with its
    ``certified_release`` and ``certificate_failure`` entries replaced."""
    centred = centred_plan(
        require_plan(calibration, ObjectivePerturbationPlan), centre, centre_weight
    )
    details = dict(calibration.details)
    details.update(centred.certificate.details())
    details.update(centred.failure.details())
    return replace(calibration, details=details, plan=centred)


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
    :func:`with_centre`). J's ridge is ``problem``'s λ: a centred objective's plan is
    calibrated at λ + η, of which η comes in through the centre term. The rows are not
    projected here: a projected plan is refused."""
    plan = require_plan(calibration, ObjectivePerturbationPlan)
    _require_unprojected(plan, "objectives with a public centre (transfer)")
    return certified_minimiser(
        X,
        y,
        plan,
        regularization=problem.regularization,
        rng=rng,
        centre=centre,
        centre_weight=centre_weight,
    )


MECHANISM = ObjectivePerturbation()
