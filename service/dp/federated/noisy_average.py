"""``noisy_average``: average of exact local fits plus one noise draw at a trusted aggregator.

Seed 000 §4.4.1 scenario 2 (Xie 2016, Fig. 4.5) and the local-averaging baseline "LA" of
Pathak et al. that seed 002 compares with. K sites with n_k rows each; λ > 0; a convex,
differentiable loss with |l′| ≤ 1 (logistic or Huber); ‖x‖ ≤ 1; y ∈ {−1, +1}. The same
protocol fits multi-class and numeric labels (section "Other label tasks" below): it only
needs each site's model to be the minimiser of a λ-strongly convex ERM objective whose
per-example loss is L-Lipschitz in the model.

Protocol (one communication round):

1. Site k computes, inside its own computation, a double ŵ_k with a *proved* bound
   ‖∇J_k(ŵ_k)‖ ≤ τ on the real-arithmetic gradient of its local objective
   J_k(w) = (1/n_k) Σ_{j∈D_k} l(y_j wᵀx_j) + (λ/2)‖w‖²
   (:func:`service.dp.optimize.certified.certified_erm`; a float check of the solver's own gradient
   norm is not enough). τ is public and the same for every site:

       τ = max(τ₀, 2F),  τ₀ = 10⁻¹⁰ + 8(4096 + d)u + 4c·γ_d/λ

   (τ₀ = :func:`service.dp.optimize.certified.tolerance` with L = 0 and 4096 rows, its value for any
   n_k ≥ 4096 and an upper bound on it for smaller n_k; F =
   :func:`service.dp.optimize.certified_failure.certificate_floor` at b = 0 for 2⁴⁰ rows, a public
   bound on the certificate at the double nearest w*_k, so a point meeting τ exists on every site
   with a factor 2 to spare). τ reveals no site's size.
   λ-strong convexity gives ‖ŵ_k − w*_k‖ ≤ τ/λ for the exact minimiser w*_k. When the bound
   is not met the job fails and nothing is released. ŵ_k is never stored or released.
2. The aggregator (the service itself, the trusted party of scenario 2) receives the K
   vectors and releases only  w_priv = m̂ + b,  m̂ = fl(fl(Σ_k ŵ_k)/K) the computed mean,
   b ~ ν(b) ∝ exp(−β‖b‖), β = ε/S (‖b‖ ~ Gamma(shape d, scale 1/β), direction uniform).

Sensitivity (seed 000 eqs 4.1–4.2, with unequal sizes, and the solver and the mean as
computed). Replacing one record of D_i changes only site i's data. By CMS11 Cor. 8 (see
``output_perturbation``) ‖w*_i − w*_i′‖ ≤ 2/(n_i λ), so by the triangle inequality
‖ŵ_i − ŵ_i′‖ ≤ 2/(n_i λ) + 2τ/λ, and the real mean (1/K)Σŵ_k moves by at most
(2/(n_i λ) + 2τ/λ)/K. The other sites' ŵ_k have the same law in both runs (they are
computed from their own rows only), so the argument below holds given them and then for the
mixture over them; the computed mean rounds, though: any order of the
K − 1 additions is componentwise within γ_{K−1}Σ_k|ŵ_kj| of the exact sum, in ℓ₂ within
γ_{K−1}Σ_k‖ŵ_k‖ ≤ γ_{K−1}·K·W, with W = (1 + τ)/λ ≥ ‖ŵ_k‖ (‖w*_k‖ ≤ 1/λ since λw*_k is
minus a mean of vectors of norm ≤ 1); the division adds u(1 + γ_{K−1})W. So m̂ is within
ρ = (γ_{K−1} + u(1 + γ_{K−1}))W (times κ = 1 + 2⁻²⁰) of the real mean in either run, and

    S_i = (2/(n_i λ) + 2τ/λ)/K + 2ρ,   S = max_i S_i = S_{n_min}

(S_i falls with n_i). β is the largest double with β·S ≤ ε in exact rational arithmetic.

Privacy, per dataset. p_D(v)/p_D′(v) = exp(−β‖v − m̂_D‖)/exp(−β‖v − m̂_D′‖)
≤ exp(β‖m̂_D − m̂_D′‖) ≤ exp(β S_i), so the release is ε_i-DP for site i's dataset with

    ε_i = β·S_i ≤ ε   (rounded up; ≈ ε·n_min/n_i),

exactly ε for the smallest site and less for larger ones; ε_i is what is charged to site i.
No δ is spent. The other sites' data are fixed under a change to D_i (parallel composition
over disjoint datasets). The released vector is the exact grid point γ·round((m̂ + b)/γ),
γ = 2⁻³², with b's law sampled exactly (:mod:`service.dp.noise.lattice`): post-processing of
m̂ + b, so the bound holds for the doubles released (issue 19 §1). The trust assumption
— the aggregator sees the local minimisers — is met because the aggregator is the
service, and nothing but w_priv leaves it.

When a certificate cannot be met: no noise enters the local objectives, so a failure is not a
noise event; a point meeting τ exists on every site (τ ≥ 2F), so a failure means that a site's
solver did not reach one. The job fails with nothing released and the
charge kept; the guarantee does not cover that event (docs/privacy.md).

Other label tasks (issue 29; docs/design.md "Studies of multi-class and numeric labels").
The argument above uses three facts about the local fit only: (a) J_k is λ-strongly convex,
(b) replacing one record changes ∇J_k by at most 2L/n_k everywhere, L a bound on the
per-example loss gradient's norm, so by CMS11 Cor. 8 the exact minimiser moves by at most
2L/(n_k λ), and (c) ‖w*_k‖ ≤ L/λ (λw*_k is minus a mean of gradients of norm ≤ L), which
bounds the vectors the mean adds. With L in place of 1 everything carries over:

* ``multiclass`` (m ≥ 3 classes, the multinomial logistic loss,
  :mod:`service.dp.optimize.multinomial`): the model is C ∈ ℝ^{m×d}, handled as vec(C) in
  dimension D = dm. The per-example gradient (p − e_y)xᵀ has ‖·‖_F ≤ √2, so L = fl(√2) ≥ √2
  (:data:`service.dp.mechanisms.multiclass.GRADIENT_SENSITIVITY` / 2) and a site's minimiser
  moves by at most 2√2/(n_k λ) in Frobenius (= ℓ₂ of vec C) norm. Its certificate is the
  multinomial one (:func:`service.dp.optimize.multinomial.certified_solve`): τ = max(τ₀, 2F)
  with τ₀ = :func:`certified.tolerance` at c = ½ in dimension dm and F =
  :func:`service.dp.optimize.multinomial.certificate_floor` at b = 0 for 2⁴⁰ rows.
* ``regression`` (y ∈ [−1, 1], the Huber loss of the residual with width h,
  :mod:`service.dp.optimize.regression`): ∇ℓ(y − wᵀx) = −ψ(r)x with |ψ| ≤ h, so L = h and the
  minimiser moves by at most 2h/(n_k λ); τ = max(τ₀, 2F) with τ₀ at c = 1 in dimension d and
  F = :func:`service.dp.optimize.regression.certificate_floor` at b = 0 for 2⁴⁰ rows. The
  squared loss has no bound L on its derivative, so no S exists for it: refused.

In every task, with D the noise dimension (dm for multi-class, d otherwise),

    S_i = (2L/(n_i λ) + 2τ/λ)/K + 2ρ,   ρ = (γ_{K−1} + u(1 + γ_{K−1}))·(L + τ)/λ·κ

(the rounding bound of the mean holds componentwise, hence in any dimension, with
W = (L + τ)/λ ≥ ‖ŵ_k‖), β the largest double with β·S ≤ ε, and the noise b ∝ exp(−β‖b‖) in
ℝ^D: ‖b‖ ~ Gamma(shape D, scale 1/β), direction uniform on the sphere, drawn and released by
the same exact lattice sampler as for binary labels. The privacy argument (the density ratio
≤ exp(β S_i)) is unchanged; site i is charged ε_i = β·S_i ≤ ε.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final, Protocol

import numpy as np

from service.dp.core.accounting import PrivacyCost
from service.dp.core.losses import Loss, get_loss
from service.dp.core.options import DEFAULT_HUBER_H
from service.dp.core.plan import Plan, plan_kind
from service.dp.core.regression_losses import RegressionHuberLoss, get_regression_loss
from service.dp.core.validation import PrivacyParameterError, check_known_params
from service.dp.data.clipping import round_up, scale_for
from service.dp.federated._common import (
    FederatedCalibration,
    FederatedProblem,
    FloatArray,
    RoundClock,
    Site,
    finite,
)
from service.dp.federated.protocol import Coordinator, FederatedProtocol, run_rounds
from service.dp.noise import lattice
from service.dp.noise.rounding import KAPPA, UNIT_ROUNDOFF, gamma
from service.dp.optimize import certified, certified_failure, multinomial, regression

__all__ = [
    "NAME",
    "PROTOCOL",
    "NoisyAveragePlan",
    "NoisyAverageSite",
    "aggregate",
    "calibrate",
    "lipschitz_bound",
    "mean_rounding",
    "run",
    "site_sensitivity",
    "tolerance",
]

NAME = "noisy_average"
ALLOWED_PARAMS: tuple[str, ...] = ()


class NoisyAverageSite(Site):
    """Site k of ``noisy_average``: fits its certified local minimiser on its own rows."""

    def local_minimiser(
        self, loss: Loss, regularization: float, tolerance: float, n_classes: int = 2
    ) -> FloatArray:
        """ŵ_k with a proved ‖∇J_k(ŵ_k)‖ ≤ τ = ``tolerance``, J_k = (1/n_k) Σ ℓ_j(w) +
        (λ/2)‖w‖² (sent to the trusted aggregator only): the margin loss l(y wᵀx) of a
        binary label, the multinomial loss of ``n_classes`` ≥ 3 classes (sent as vec C, of
        length d·K) or a residual loss ℓ(y − wᵀx) (``loss`` a regression loss)."""
        failure = (
            f"site {self.index}'s local minimiser could not be certified to the tolerance "
            "the sensitivity assumes; no model was released"
        )
        if isinstance(loss, RegressionHuberLoss):
            coef = regression.certified_regression_erm(
                self._X,
                self._y,
                loss,
                regularization=regularization,
                tolerance=tolerance,
                failure=failure,
            )
            return self._send(coef)
        if n_classes >= 3:
            matrix = multinomial.certified_erm(
                self._X,
                self._y,
                n_classes,
                regularization=regularization,
                tolerance=tolerance,
                failure=failure,
            )
            return self._send(matrix.ravel(), self.d * n_classes)
        coef = certified.certified_erm(
            self._X,
            self._y,
            loss,
            regularization=regularization,
            tolerance=tolerance,
            failure=failure,
        )
        return self._send(coef)


class LocalFitter(Protocol):
    """What the aggregator may ask a site: its certified local minimiser."""

    index: int

    def local_minimiser(
        self, loss: Loss, regularization: float, tolerance: float, n_classes: int = 2
    ) -> FloatArray: ...


#: the certificate floor is taken at this many rows (it grows with n, very slowly), so that τ
#: holds for every site and reveals no site's size
_ROWS_BOUND = 2**40


def tolerance(d: int, loss: Loss, regularization: float, n_classes: int = 2) -> float:
    """τ = max(τ₀, 2F), the same for every site: τ₀ = :func:`certified.tolerance` with L = 0
    and ``certified.BLOCK_ROWS`` rows (≥ its value for any n_k), F = the task's certificate
    floor at b = 0 for 2⁴⁰ rows (≥ its value for any n_k ≤ 2⁴⁰): the margin one
    (:func:`certified_failure.certificate_floor`), the multinomial one for ``n_classes`` ≥ 3
    (c = ½ in dimension d·K) or the regression one for a regression ``loss``: a point meeting
    τ exists on every site, with a factor 2 to spare; τ reveals no n_k."""
    multi = n_classes >= 3 and not isinstance(loss, RegressionHuberLoss)
    base = certified.tolerance(
        n=certified.BLOCK_ROWS,
        d=d * n_classes if multi else d,
        c=multinomial.CURVATURE if multi else float(loss.c),
        strong_convexity=regularization,
        linear_bound=0.0,
    )
    if isinstance(loss, RegressionHuberLoss):
        floor = regression.certificate_floor(
            n=_ROWS_BOUND, d=d, loss=loss, strong_convexity=regularization, noise_norm=0.0
        )
    elif multi:
        floor = multinomial.certificate_floor(
            n=_ROWS_BOUND,
            d=d,
            n_classes=n_classes,
            strong_convexity=regularization,
            noise_norm=0.0,
        )
    else:
        floor = certified_failure.certificate_floor(
            n=_ROWS_BOUND, d=d, loss=loss, strong_convexity=regularization, noise_norm=0.0
        )
    return max(base, 2.0 * floor)


def lipschitz_bound(loss: Loss, n_classes: int = 2) -> float:
    """L, a double ≥ the norm of one example's loss gradient: 1 for a margin loss, fl(√2) ≥ √2
    for the multinomial loss (‖(p − e_y)xᵀ‖_F ≤ √2), h for the Huber loss of a residual."""
    if isinstance(loss, RegressionHuberLoss):
        return float(loss.h)
    if n_classes >= 3:
        return multinomial.LIPSCHITZ
    return 1.0


def mean_rounding(
    sites: int, tau: float, regularization: float, lipschitz: float = 1.0
) -> Fraction:
    """ρ = (γ_{K−1} + u(1 + γ_{K−1}))·(L + τ)/λ·κ: how far the computed mean of K vectors of
    norm ≤ W = (L + τ)/λ can be from their real mean (module docstring)."""
    g = Fraction(gamma(sites - 1))
    width = (Fraction(lipschitz) + Fraction(tau)) / Fraction(regularization)
    return (g + Fraction(UNIT_ROUNDOFF) * (1 + g)) * width * Fraction(KAPPA)


def site_sensitivity(
    n: int,
    sites: int,
    tau: float,
    regularization: float,
    rho: Fraction,
    lipschitz: float = 1.0,
) -> Fraction:
    """S_i = (2L/(n_i λ) + 2τ/λ)/K + 2ρ, exactly (module docstring)."""
    lam = Fraction(regularization)
    exact = 2 * Fraction(lipschitz) / (n * lam)
    return (exact + 2 * Fraction(tau) / lam) / sites + 2 * rho


@plan_kind("federated.noisy_average_site")
@dataclass(frozen=True, slots=True)
class AverageSitePlan(Plan):
    """Site i: its size n_i, S_i (rounded up) and the ε_i it is charged (≤ ε)."""

    n: int
    sensitivity: float
    epsilon: float

    def record(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "sensitivity": finite(self.sensitivity),
            "epsilon": finite(self.epsilon),
            "delta": 0.0,
        }


@plan_kind("federated.noisy_average")
@dataclass(frozen=True, slots=True)
class NoisyAveragePlan(Plan):
    """What the noisy average's calibration fixed (module docstring): τ, the bounds behind S,
    β = ε/S and each site's S_i and ε_i."""

    d: int
    epsilon: float
    loss: str
    huber_h: float | None
    regularization: float
    certificate_tolerance: float
    distance_to_exact_minimiser_bound: float
    mean_rounding_bound: float
    sensitivity: float
    sensitivity_exact_minimisers: float
    beta: float
    sites: tuple[AverageSitePlan, ...]
    #: the label task and K (2 binary, the classes multi-class, 1 regression)
    task: str = "binary"
    n_classes: int = 2
    #: L, the bound on one example's loss gradient (1, fl(√2) or h)
    lipschitz: float = 1.0

    @property
    def dimension(self) -> int:
        """D, the noise's dimension: d·K for a multi-class model, d otherwise."""
        return self.d * self.n_classes if self.task == "multiclass" else self.d

    def loss_object(self) -> Loss:
        """The loss the sites fit (a residual loss for regression)."""
        h = self.huber_h if self.huber_h is not None else DEFAULT_HUBER_H
        if self.task == "regression":
            return get_regression_loss(self.loss, h=h)
        return get_loss(self.loss, h=h)

    def record(self) -> dict[str, Any]:
        """The calibration's ``details``: every number under the papers' names."""
        d, beta, dim = self.d, self.beta, self.dimension
        details: dict[str, Any] = {
            "protocol": NAME,
            "K": len(self.sites),
            "d": d,
            "epsilon": finite(self.epsilon),
            "delta": 0.0,
            "loss": self.loss,
            "lipschitz": finite(self.lipschitz),
            "regularization": finite(self.regularization),
            "n_min": min(site.n for site in self.sites),
            "certificate_tolerance": finite(self.certificate_tolerance),
            "distance_to_exact_minimiser_bound": finite(self.distance_to_exact_minimiser_bound),
            "mean_rounding_bound": finite(self.mean_rounding_bound),
            "sensitivity": finite(self.sensitivity),
            "sensitivity_exact_minimisers": finite(self.sensitivity_exact_minimisers),
            "beta": finite(beta),
            "noise": "norm_exponential",
            "noise_norm_distribution": f"Gamma(shape={dim}, scale={1.0 / beta!r})",
            "expected_noise_norm": finite(dim / beta),
            "release": lattice.RELEASE_NOTE,
            "sites": [site.record() for site in self.sites],
        }
        if self.huber_h is not None:
            details["huber_h"] = finite(self.huber_h)
        if dim != d:
            details["noise_dimension"] = dim
        return details


def _problem_loss(problem: FederatedProblem) -> Loss:
    """The loss the sites fit: the margin loss, or for regression the Huber loss of the
    residual (the squared loss has no bound on ψ: refused)."""
    if problem.task != "regression":
        return problem.loss_object()
    loss = get_regression_loss(problem.loss, h=problem.huber_h)
    if not isinstance(loss, RegressionHuberLoss):
        raise PrivacyParameterError(
            f"{NAME} fits numeric labels with the huber loss only: the squared loss has no "
            "bound on its derivative, so a site's minimiser has no sensitivity to calibrate to"
        )
    return loss


def calibrate(problem: FederatedProblem) -> FederatedCalibration:
    """β = ε/S with S = (2L/(n_min λ) + 2τ/λ)/K + 2ρ; per-site ε_i = β·S_i (module
    docstring); L and τ those of the label task."""
    check_known_params(problem.params, ALLOWED_PARAMS, NAME)
    K, d, lam, eps = problem.sites, problem.d, problem.regularization, problem.epsilon
    loss = _problem_loss(problem)
    classes = problem.n_classes if problem.task == "multiclass" else 2
    big_l = lipschitz_bound(loss, classes)
    n_min = min(problem.site_sizes)
    tau = tolerance(d, loss, lam, classes)
    rho = mean_rounding(K, tau, lam, big_l)
    exact = {n: site_sensitivity(n, K, tau, lam, rho, big_l) for n in set(problem.site_sizes)}
    worst = exact[n_min]
    beta = scale_for(eps, worst)
    # the smallest site is charged ε itself; the others β·S_i rounded up (≤ ε: S_i ≤ S)
    site_eps = [
        eps if n == n_min else min(eps, round_up(Fraction(beta) * exact[n]))
        for n in problem.site_sizes
    ]
    plan = NoisyAveragePlan(
        d=d,
        epsilon=eps,
        loss=loss.name,
        huber_h=float(problem.huber_h) if loss.name == "huber" else None,
        regularization=lam,
        certificate_tolerance=tau,
        distance_to_exact_minimiser_bound=round_up(Fraction(tau) / Fraction(lam)),
        mean_rounding_bound=round_up(rho),
        sensitivity=round_up(worst),
        sensitivity_exact_minimisers=round_up(2 * Fraction(big_l) / (K * n_min * Fraction(lam))),
        beta=beta,
        sites=tuple(
            AverageSitePlan(n=n, sensitivity=round_up(exact[n]), epsilon=float(e))
            for n, e in zip(problem.site_sizes, site_eps, strict=True)
        ),
        task=problem.task,
        n_classes=problem.n_classes,
        lipschitz=big_l,
    )
    two_l = "2" if big_l == 1.0 else f"2L (L = {big_l:.6g})"
    return FederatedCalibration(
        protocol=NAME,
        site_costs=tuple(PrivacyCost(e, 0.0) for e in site_eps),
        private=True,
        details=plan.record(),
        composition=(
            f"one release m̂ + b with b ∝ exp(−β‖b‖), β = ε/S = {beta:.6g}: each site's "
            f"local minimiser is certified (its gradient proved ≤ τ = {tau:.6g}, so within τ/λ "
            f"of the exact one), and the computed average of the K = {K} of them moves by at "
            f"most S_i = ({two_l}/(n_i λ) + 2τ/λ)/K + 2ρ (ρ = {float(rho):.3g} the rounding of "
            f"the mean) when one record of site i changes; the noise is in dimension "
            f"{plan.dimension}, so site i's dataset is protected at "
            f"ε_i = β·S_i ≤ ε = {eps:g} (the smallest site at exactly ε); no δ; a site whose "
            f"certificate is not met fails the job with nothing released"
        ),
        rounds=1,
        notes=(
            "trusted aggregator: the service sees the sites' exact local minimisers inside one "
            "computation and releases only their average plus noise; they are never stored",
        ),
        plan=plan,
    )


class _Aggregator(Coordinator):
    """The trusted aggregator: one round collecting the K certified local minimisers (each
    with a proved gradient ≤ τ), then their computed mean fl(fl(Σŵ_k)/K) released with
    ν(b) ∝ exp(−β‖b‖) noise drawn from the job's own generator."""

    site_streams = False

    def __init__(
        self,
        loss: Loss,
        regularization: float,
        *,
        beta: float,
        tolerance: float,
        n_classes: int = 2,
    ) -> None:
        super().__init__(1)
        self._loss, self._lam, self._beta, self._tau = loss, regularization, beta, tolerance
        self._classes = n_classes
        self._mean: FloatArray | None = None

    def ask(self, t: int, k: int, party: LocalFitter, rng: np.random.Generator | None) -> Any:
        del t, k, rng  # the sites draw no noise; one round
        return party.local_minimiser(self._loss, self._lam, self._tau, self._classes)

    def combine(self, t: int, answers: list[Any], parties: Sequence[Any]) -> None:
        del t, parties
        total = np.zeros_like(answers[0])
        for coef in answers:  # in site order: the sum the rounding bound covers
            total += coef
        self._mean = total / len(answers)

    def result(self, rng: np.random.Generator | None) -> FloatArray:
        assert self._mean is not None
        released: FloatArray = lattice.norm_exponential_release(
            self._mean, beta=self._beta, rng=rng
        )
        return released


def aggregate(
    sites: Sequence[LocalFitter],
    loss: Loss,
    regularization: float,
    *,
    beta: float,
    tolerance: float,
    rng: np.random.Generator | None,
    clock: RoundClock,
    n_classes: int = 2,
) -> FloatArray:
    """The trusted aggregator (:class:`_Aggregator`) over ``sites``. It never sees a site's
    rows. For ``n_classes`` ≥ 3 the result is vec C (length d·K)."""
    aggregator = _Aggregator(
        loss, regularization, beta=beta, tolerance=tolerance, n_classes=n_classes
    )
    return run_rounds(aggregator, sites, rng=rng, clock=clock)


class NoisyAverage(FederatedProtocol[NoisyAveragePlan]):
    """The noisy average's own steps within the shared skeleton (:mod:`.protocol`); it is not
    run over nodes (its sites' answers are exact, the noise is the aggregator's)."""

    name = NAME
    plan_type = NoisyAveragePlan

    def calibrate(self, problem: FederatedProblem) -> FederatedCalibration:
        return calibrate(problem)

    def party(
        self,
        problem: FederatedProblem,
        plan: NoisyAveragePlan,
        index: int,
        X: FloatArray,
        y: FloatArray,
    ) -> NoisyAverageSite:
        del problem, plan
        return NoisyAverageSite(index, X, y)

    def coordinator(self, problem: FederatedProblem, plan: NoisyAveragePlan) -> Coordinator:
        del problem
        for name, value in (
            ("beta", plan.beta),
            ("certificate_tolerance", plan.certificate_tolerance),
        ):
            if not math.isfinite(value) or value <= 0.0:
                raise ValueError(f"{name} must be finite and positive")
        return _Aggregator(
            plan.loss_object(),
            plan.regularization,
            beta=plan.beta,
            tolerance=plan.certificate_tolerance,
            n_classes=plan.n_classes if plan.task == "multiclass" else 2,
        )


PROTOCOL: Final[NoisyAverage] = NoisyAverage()
run = PROTOCOL.run
