"""``generalized_objective_perturbation``: Kifer, Smith & Thakurta 2012 (KST12) Alg. 1,
re-derived for PrivFit's neighbours (replace one record): ε-DP with noise ∝ exp(−β‖b‖), or
(ε, δ)-DP with Gaussian noise when δ > 0.

Setting (seed 000 §3.4). Linear model, margin loss l convex with 0 ≤ l″ ≤ c (a.e.) and
|l′| ≤ 1, ‖x_i‖ ≤ 1, so the per-record gradient is ∇ℓ_i(w) = l′(y_i wᵀx_i) y_i x_i with
‖∇ℓ_i‖ ≤ ζ = 1, and its Hessian l″ x_i x_iᵀ has rank one and eigenvalue ≤ c (KST12's
"λ"; the thesis's λ ≈ d over-estimate is not used). In KST12's n-scaled form the release is

    w_priv = argmin_w Σ_i ℓ_i(w) + r(w) + (Δ_K/2)‖w‖² + bᵀw,   r(w) = (nλ/2)‖w‖²,

i.e. in PrivFit's scale argmin J(w) + bᵀw/n + (Δ/2)‖w‖² with Δ = Δ_K/n. KST12 take
Δ_K ≥ 2c/ε; PrivFit uses Δ_K = 2c/ε by default (parameter ``kifer_Delta`` overrides it).

KST12 print their noise for add/remove neighbours: ν ∝ exp(−ε‖b‖/(2ζ)), or
N(0, ζ²(8 ln(2/δ) + 4ε)/ε² I). Under replace-one neighbours the gradient difference is up to
2ζ, so those constants do not carry over; here is the derivation PrivFit implements.

Density. The first-order condition is a bijection w ↦ b_D(w) = −Σ_i ∇ℓ_i(w) − (nλ + Δ_K)w
(strictly convex objective, unconstrained domain), so p_D(w) = ν(b_D(w))·|det ∇b_D(w)|.

Jacobian part (tighter than CMS11's square). Let D, D′ share n − 1 records, with
M = Σ_common l″_j x_j x_jᵀ + (nλ + Δ_K)I ⪰ (nλ + Δ_K)I, u = √l″(d)·x_d, v = √l″(d′)·x_d′.
By the matrix determinant lemma det(M + uuᵀ)/det(M + vvᵀ) = (1 + uᵀM⁻¹u)/(1 + vᵀM⁻¹v)
≤ 1 + ‖u‖²/(nλ + Δ_K) ≤ 1 + c/(nλ + Δ_K). Hence the Jacobian costs
ε_J = ln(1 + c/(nλ + Δ_K)) ≤ ln(1 + ε/2) < ε/2 at the default Δ_K. The noise gets the rest,
ε_n = ε − ε_J.

Noise part. b_D′(w) − b_D(w) = Δb(w) = a x_d − a′ x_d′ with |a|, |a′| ≤ 1 (a, a′ the signed
l′ values), so ‖Δb‖ ≤ 2 and Δb lies in span{x_d, x_d′}.

* δ = 0: ν ∝ exp(−β‖b‖) gives ν(b_D)/ν(b_D′) ≤ e^{β‖Δb‖} ≤ e^{2β}; with β = ε_n/2 the
  privacy loss is ≤ ε_n + ε_J = ε everywhere: ε-DP. (With Δ_K = 0 this is CMS11 objective
  perturbation with the un-squared Jacobian bound.)
* δ > 0: ν = N(0, σ²I). Using ‖Δb‖² ≤ 4 the privacy loss at w is
  L(w) = (2⟨b_D, Δb⟩ + ‖Δb‖²)/(2σ²) + ε_J ≤ (⟨b_D, Δb⟩ + 2)/σ² + ε_J, so L ≤ ε whenever
  ⟨b_D, Δb⟩ ≤ ε_nσ² − 2 =: 2σu. When w ~ M(D), b_D(w) ~ N(0, σ²I) exactly, and the bad
  event has two valid bounds:

  (a) ⟨b_D, Δb⟩ ≤ |Z₁| + |Z₂| with Z₁ = ⟨b_D, x_d⟩, Z₂ = ⟨b_D, x_d′⟩ ~ N(0, ≤ σ²), so
      P[bad] ≤ P[|Z₁| > σu] + P[|Z₂| > σu] ≤ 4Φ̄(u);
  (b) ⟨b_D, Δb⟩ ≤ ‖Δb‖·‖P b_D‖ ≤ 2‖P b_D‖ with P the projection on span{x_d, x_d′}
      (dimension ≤ k = min(d, 2)), so P[bad] ≤ P[‖P b_D‖ > σu] ≤ P[χ²_k > u²].

  PrivFit takes the u solving min(4Φ̄(u), P[χ²_k > u²]) = δ (the minimum of two valid
  bounds is valid and decreasing in u) and the σ with (ε_nσ² − 2)/(2σ) = u:

      σ = (u + √(u² + 2ε_n))/ε_n.

  A privacy loss bounded by ε outside an event of probability δ (under either dataset;
  the argument is symmetric) implies (ε, δ)-DP. Unlike GOP (seed 002) there is no √d:
  the linear-model structure confines the argument to a ≤ 2-dimensional projection of b
  instead of ‖b‖. (For d = 1 both reduce to the same 2Φ̄(u) = δ condition.)

Huber: l″ jumps at two points per record; the map b_D is Lipschitz and piecewise C¹, the
change of variables holds almost everywhere and every bound above is pointwise where l″
exists (the same argument as CMS11's Huber corollary).

Release in floating point (issue 19 §1): the argument above is about the exact minimiser
for a real b; PrivFit runs it at ε₁ = ε − ε_r (``epsilon_objective``) and releases the
certified minimiser of :mod:`service.dp.optimize.certified` (``certified_release``): (ε₁ + ε_r)-DP
for the released doubles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import special

from service.dp.core.base import Calibration, FittedModel, Problem, ProgressCallback
from service.dp.core.options import Capabilities, MechanismOptions, option
from service.dp.core.plan import plan_kind
from service.dp.core.validation import PrivacyParameterError, nonnegative_float_param
from service.dp.mechanisms._common import (
    Inputs,
    ObjectivePlan,
    certificate_failure,
    certified_minimiser,
    check_common,
    chi_mean,
    problem_loss,
    release,
    report,
    require_plan,
    require_smooth_loss,
)
from service.dp.optimize import certified, certified_failure

__all__ = [
    "CAPABILITIES",
    "MECHANISM",
    "GeneralizedObjectivePerturbation",
    "GeneralizedObjectivePlan",
    "Options",
    "gaussian_sigma",
    "gaussian_tail_quantile",
]

_PARAMS = ("kifer_Delta",)


# ---- options and capabilities (service.dp.core.options) ---------------------------------


@dataclass(frozen=True, slots=True)
class Options(MechanismOptions):
    """KST12's one option. Also checked with the dataset: it leaves budget for the noise."""

    kifer_Delta: float | None = option(
        None,
        "The extra regularisation Δ_K ≥ 2c/ε₁ of KST12 (module docstring).",
        ge=0.0,
        computed_default="2c/ε₁ (ε₁: the objective's share of ε)",
    )


CAPABILITIES = Capabilities()


def gaussian_tail_quantile(d: int, delta: float) -> float:
    """The u > 0 with min(4Φ̄(u), P[χ²_k > u²]) = δ, k = min(d, 2) (module docstring).

    Φ̄(u) = ``special.ndtr(-u)`` and P[χ²_k > x] = ``special.chdtrc(k, x)`` (what
    ``scipy.stats.chi2.sf`` evaluates, without importing ``scipy.stats``)."""
    k = min(d, 2)

    def bound(u: float) -> float:
        return min(4.0 * float(special.ndtr(-u)), float(special.chdtrc(k, u * u)))

    # bound(0) = 1 > δ and bound(40) < 1e-300 < δ; bound is continuous and decreasing.
    from scipy import optimize  # here, not at the top: processes that never solve skip it

    return float(optimize.brentq(lambda u: bound(u) - delta, 0.0, 40.0, xtol=1e-14, rtol=1e-14))


def gaussian_sigma(epsilon_noise: float, u: float) -> float:
    """σ with (ε_n σ² − 2)/(2σ) = u: σ = (u + √(u² + 2ε_n))/ε_n."""
    return (u + math.sqrt(u * u + 2.0 * epsilon_noise)) / epsilon_noise


@plan_kind("generalized_objective_perturbation")
@dataclass(frozen=True, slots=True)
class GeneralizedObjectivePlan(ObjectivePlan):
    """KST12's plan (module docstring): Δ_K (``kifer_Delta``; Δ = Δ_K/n), the noise budget
    ε_n = ε₁ − ε_J, the norm-exponential β = ε_n/2 (δ = 0) or the Gaussian σ with its tail
    quantile u (δ > 0), the split ε = ε₁ + ε_r and the certified release."""

    mechanism = "generalized_objective_perturbation"

    kifer_Delta: float
    noise_epsilon: float
    gaussian_tail_quantile: float | None

    @property
    def expected_noise_norm(self) -> float:
        if self.noise == "gaussian":
            return self.noise_sigma * chi_mean(self.inputs.d)
        return self.inputs.d / self.noise_beta

    def details(self) -> dict[str, Any]:
        n, d, lam = self.inputs.n, self.inputs.d, self.inputs.regularization
        details = self.inputs.details()
        details.update(
            kifer_Delta=self.kifer_Delta,
            Delta=self.Delta,
            effective_regularization=self.effective_regularization,
            epsilon_objective=self.epsilon_objective,
            jacobian_epsilon=self.jacobian_epsilon,
            noise_epsilon=self.noise_epsilon,
            gradient_sensitivity=2.0,
        )
        if self.noise == "gaussian":
            details.update(
                variant="gaussian",
                noise="gaussian",
                sigma=self.sigma,
                gaussian_tail_quantile=self.gaussian_tail_quantile,
            )
        else:
            beta = self.noise_beta
            details.update(
                variant="pure",
                noise="norm_exponential",
                beta=beta,
                noise_norm_distribution=f"Gamma(shape={d}, scale={1.0 / beta!r})",
            )
        expected = self.expected_noise_norm
        details.update(
            expected_noise_norm=expected,
            expected_coef_shift_bound=expected / (n * lam + self.kifer_Delta),
        )
        details.update(self.certificate.details())
        details.update(self.failure.details())
        return details

    def calibration(self) -> Calibration:
        eps, delta = self.inputs.epsilon, self.inputs.delta
        if self.noise == "gaussian":
            how = (
                f"Gaussian noise σ = {self.noise_sigma:.6g}; the privacy loss exceeds ε with "
                f"probability at most δ = {delta:g}"
            )
        else:
            how = f"noise ∝ exp(−β‖b‖), β = ε_n/2 = {self.noise_beta:.6g}; no δ is spent"
        return Calibration(
            epsilon=eps,
            delta=delta,
            details=self.details(),
            expected_noise_norm=self.expected_noise_norm,
            composition=(
                f"single release, ε = {eps:g} = Jacobian part ln(1 + c/(nλ + Δ_K)) = "
                f"{self.jacobian_epsilon:.6g} + noise part ε_n = {self.noise_epsilon:.6g} "
                f"(Kifer et al. 2012 objective perturbation, replace-one neighbours) + release "
                f"part ε_r = {self.certificate.epsilon:.6g}: {self.certificate.describe()}; "
                f"{how}. {certified_failure.failure_sentence(self.failure.details())}"
            ),
            plan=self,
        )


class GeneralizedObjectivePerturbation:
    """KST12 objective perturbation: ε-DP (δ = 0) or (ε, δ)-DP with Gaussian noise (δ > 0)."""

    name = "generalized_objective_perturbation"
    options = Options
    capabilities = CAPABILITIES

    def validate_params(self, problem: Problem) -> Problem:
        loss = check_common(problem, _PARAMS)
        require_smooth_loss(loss, self.name)
        if "kifer_Delta" in problem.params:
            nonnegative_float_param(problem.params, "kifer_Delta", 0.0)
        return problem

    def calibrate(self, problem: Problem) -> Calibration:
        return self.plan(problem).calibration()

    def plan(self, problem: Problem) -> GeneralizedObjectivePlan:
        """The plan of a validated problem (:meth:`validate_params`), from public numbers;
        :class:`PrivacyParameterError` when ``kifer_Delta`` leaves the noise no budget or the
        certificate may fail too often."""
        loss = problem_loss(problem)
        n, d, lam, eps, delta = (
            problem.n,
            problem.d,
            problem.regularization,
            problem.epsilon,
            problem.delta,
        )
        c = loss.c

        def noise_budget(budget: float) -> tuple[float, float, float]:
            """(Δ_K, ε_J, ε_n) at objective budget ``budget``."""
            kifer_delta = nonnegative_float_param(problem.params, "kifer_Delta", 2.0 * c / budget)
            jacobian = math.log1p(c / (n * lam + kifer_delta))
            return kifer_delta, jacobian, budget - jacobian

        def public(budget: float) -> tuple[float, float]:
            kifer_delta, _, eps_n = noise_budget(budget)
            if not eps_n > 0.0:
                return lam + kifer_delta / n, 0.0  # refused below, with its own message
            if delta == 0.0:
                bound = certified.norm_exponential_quantile(d, eps_n / 2.0)
            else:
                u = gaussian_tail_quantile(d, delta)
                bound = certified.gaussian_quantile(d, gaussian_sigma(eps_n, u))
            return lam + kifer_delta / n, bound / n

        eps_objective, certificate = certified.split(eps, n=n, d=d, c=c, public=public)
        kifer_delta, jacobian_epsilon, epsilon_noise = noise_budget(eps_objective)
        if not epsilon_noise > 0.0:
            raise PrivacyParameterError(
                f"kifer_Delta = {kifer_delta:g} leaves no budget for the noise: the Jacobian "
                f"term ln(1 + c/(nλ + Δ)) = {jacobian_epsilon:.6g} is not below the objective's "
                f"ε = {eps_objective:g}; use kifer_Delta ≥ {2.0 * c / eps_objective:g} "
                "(Kifer et al.'s 2c/ε)"
            )
        if delta == 0.0:
            law, beta, sigma, u = "norm_exponential", epsilon_noise / 2.0, None, None
        else:
            u = gaussian_tail_quantile(d, delta)
            law, beta, sigma = "gaussian", None, gaussian_sigma(epsilon_noise, u)
        inputs = Inputs.of(problem)
        return GeneralizedObjectivePlan(
            inputs=inputs,
            noise=law,
            beta=beta,
            sigma=sigma,
            Delta=kifer_delta / n,
            effective_regularization=lam + kifer_delta / n,
            epsilon_objective=eps_objective,
            jacobian_epsilon=jacobian_epsilon,
            certificate=certificate,
            failure=certificate_failure(
                inputs, (law, beta, sigma), certificate, mechanism=self.name
            ),
            kifer_Delta=kifer_delta,
            noise_epsilon=epsilon_noise,
            gaussian_tail_quantile=u,
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
        plan = require_plan(calibration, GeneralizedObjectivePlan)
        report(progress, 0.0)
        coef = certified_minimiser(X, y, plan, regularization=plan.inputs.regularization, rng=rng)
        model = release(coef)
        report(progress, 1.0)
        return model


MECHANISM = GeneralizedObjectivePerturbation()
