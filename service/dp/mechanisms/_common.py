"""Helpers shared by the single-dataset ERM mechanisms (not part of the public API)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Context, Decimal
from fractions import Fraction
from functools import partial
from typing import Any, ClassVar, Final, TypeVar

import numpy as np
from numpy.typing import NDArray
from scipy import special

from service.dp.core.accounting import check_epsilon_delta, remainder_within
from service.dp.core.base import Calibration, LinearModel, Problem, ProgressCallback
from service.dp.core.losses import Loss, get_loss
from service.dp.core.options import option
from service.dp.core.plan import Plan, plan_kind
from service.dp.core.regression_losses import get_regression_loss
from service.dp.core.validation import (
    PrivacyParameterError,
    check_dimensions,
    check_int_in,
    check_known_params,
    check_regularization,
)
from service.dp.data.clipping import round_up, scale_for
from service.dp.data.projection import MAX_SEED, PROJECTION_KINDS
from service.dp.noise import draws as noise
from service.dp.noise import lattice
from service.dp.optimize import certified, certified_failure, multinomial

__all__ = [
    "MAX_PROJECTION_DIM",
    "PROJECTION_PARAMS",
    "SOLVE_PASSES",
    "Inputs",
    "MechanismPlan",
    "NormExponentialObjectivePlan",
    "ObjectivePlan",
    "OutputPlan",
    "certificate_failure",
    "certified_minimiser",
    "check_common",
    "chi_mean",
    "jacobian_slack",
    "log1p_upper",
    "noise_enclosure",
    "problem_loss",
    "projection_kind_option",
    "projection_params",
    "projection_seed_option",
    "release",
    "report",
    "require_plan",
    "require_smooth_loss",
]

P = TypeVar("P", bound=Plan)
OP = TypeVar("OP", bound="OutputPlan")
NP = TypeVar("NP", bound="NormExponentialObjectivePlan")


def task_loss(name: str, *, h: float, task: str) -> Loss:
    """The loss ``name`` of ``task``: a margin loss (:mod:`service.dp.core.losses`), or for
    regression a loss of the residual (:mod:`service.dp.core.regression_losses`)."""
    if task == "regression":
        return get_regression_loss(name, h=h)
    return get_loss(name, h=h)


def problem_loss(problem: Problem) -> Loss:
    """The loss object named by the problem (Huber with width ``problem.huber_h``)."""
    return task_loss(problem.loss, h=problem.huber_h, task=problem.task)


def check_common(
    problem: Problem, allowed_params: tuple[str, ...], *, private: bool = True
) -> Loss:
    """Checks every ERM mechanism needs: n, d, λ, loss, known params, and (ε, δ) if private."""
    check_dimensions(problem.n, problem.d)
    check_regularization(problem.regularization)
    if private:
        check_epsilon_delta(problem.epsilon, problem.delta)
    check_known_params(problem.params, allowed_params, problem.mechanism)
    try:
        return problem_loss(problem)
    except ValueError as exc:
        raise PrivacyParameterError(str(exc)) from exc


#: Passes over the design one certified convex solve is counted as (measured: 3–10;
#: :mod:`service.dp.analysis.work`).
SOLVE_PASSES: Final[int] = 20

#: The options of a public random projection of the rows (``dp_sgd``,
#: ``objective_perturbation``; :mod:`service.dp.data.projection`).
PROJECTION_PARAMS: tuple[str, ...] = ("projection_dim", "projection_kind", "projection_seed")
#: The largest projection dimension k accepted.
MAX_PROJECTION_DIM = 1_000_000


def projection_kind_option() -> Any:
    """The ``projection_kind`` option field (:func:`~service.dp.core.options.option`), the same
    for every mechanism with a projection."""
    return option(
        None,
        "The projection matrix's entries (with `projection_dim` only; omitted: `gaussian`).",
    )


def projection_seed_option() -> Any:
    """The ``projection_seed`` option field, the same for every mechanism with a projection."""
    return option(
        None,
        "Public seed of the projection matrix (with `projection_dim` only; null: drawn from the "
        "CSPRNG).",
        ge=0,
        le=MAX_SEED,
    )


def projection_params(
    raw: Mapping[str, Any],
    *,
    task: str,
    refused: Mapping[str, str],
    largest: int | None = None,
) -> dict[str, Any]:
    """The checked projection options of a mechanism's raw ``params``: ``projection_dim`` k
    (an integer in [1, 10⁶], or None: no projection) and, only with k, ``projection_kind``
    (one of :data:`~service.dp.data.projection.PROJECTION_KINDS`; omitted or null: ``gaussian``) and
    ``projection_seed`` (an integer in [0, MAX_SEED], or None: drawn when the fit runs).

    Refused (:class:`PrivacyParameterError`): k for a task named in ``refused`` (the message is
    "projection_dim is not offered for <task> fits" followed by the mechanism's reason), k
    above ``largest`` when one is given (the number of features d), and a kind or seed
    without k. Only public request fields are read."""
    k = raw.get("projection_dim")
    if k is not None:
        k = check_int_in(k, "projection_dim", 1, MAX_PROJECTION_DIM)
    out: dict[str, Any] = {"projection_dim": k}
    if k is not None and task in refused:
        raise PrivacyParameterError(f"projection_dim is not offered for {task} fits{refused[task]}")
    if k is None:
        for extra in ("projection_kind", "projection_seed"):
            if raw.get(extra) is not None:
                raise PrivacyParameterError(f"{extra} needs projection_dim")
        return out
    if largest is not None and k > largest:
        raise PrivacyParameterError(
            f"projection_dim must not exceed the number of features d = {largest}, got {k}: "
            "a projection to more dimensions than the rows have only adds noise dimensions "
            "(k = d is allowed)"
        )
    # an explicit null is the schema's default (clients that send every field send it)
    kind = raw.get("projection_kind")
    kind = "gaussian" if kind is None else kind
    if kind not in PROJECTION_KINDS:
        raise PrivacyParameterError(
            f"projection_kind must be one of {', '.join(PROJECTION_KINDS)}, got {kind!r}"
        )
    out["projection_kind"] = kind
    seed = raw.get("projection_seed")
    out["projection_seed"] = (
        None if seed is None else check_int_in(seed, "projection_seed", 0, MAX_SEED)
    )
    return out


def require_smooth_loss(loss: Loss, mechanism: str) -> None:
    """Objective-perturbation proofs change variables through l''; refuse losses without it."""
    if not loss.smooth:
        raise PrivacyParameterError(
            f"{mechanism} needs a loss with a bounded second derivative (logistic or huber); "
            f"{loss.name!r} has none"
        )


@plan_kind("erm_inputs")
@dataclass(frozen=True, slots=True)
class Inputs(Plan):
    """The public inputs of one single-dataset fit, as its plan was calibrated: n, d, the
    (ε, δ) the mechanism was calibrated with (the ledger amounts of ``make_problem``), the loss
    (with its curvature bound c and Huber width) and λ. Every mechanism's plan starts with
    them and its record shows them (:meth:`details`)."""

    n: int
    d: int
    epsilon: float
    delta: float
    loss: str
    huber_h: float
    c: float
    regularization: float
    #: What is predicted (:mod:`service.dp.core.tasks`); K classes (1 for regression).
    task: str = "binary"
    n_classes: int = 2

    @classmethod
    def of(cls, problem: Problem) -> Inputs:
        loss = problem_loss(problem)
        return cls(
            n=int(problem.n),
            d=int(problem.d),
            epsilon=float(problem.epsilon),
            delta=float(problem.delta),
            loss=loss.name,
            huber_h=float(problem.huber_h),
            c=_curvature(problem, loss),
            regularization=float(problem.regularization),
            task=problem.task,
            n_classes=int(problem.n_classes),
        )

    def loss_function(self) -> Loss:
        """The loss object (Huber with width ``huber_h``; a residual loss for regression)."""
        return task_loss(self.loss, h=self.huber_h, task=self.task)

    def details(self) -> dict[str, Any]:
        """The public inputs every calibration reports."""
        details: dict[str, Any] = {
            "n": self.n,
            "d": self.d,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "loss": self.loss,
            "c": self.c,
            "lipschitz": multinomial.LIPSCHITZ if self.task == "multiclass" else 1.0,
            "regularization": self.regularization,
        }
        if self.loss == "huber":
            details["huber_h"] = self.huber_h
        if self.task == "regression":
            # |ℓ′| ≤ h for the Huber loss of the residual; the squared loss has no bound
            if self.loss == "huber":
                details["lipschitz"] = self.huber_h
            else:
                del details["lipschitz"]
        if self.task != "binary":
            details["task"] = self.task
            if self.task == "multiclass":
                details["n_classes"] = self.n_classes
        return details


def _curvature(problem: Problem, loss: Loss) -> float:
    """c, the bound on the loss's curvature: l″ ≤ c for the binary margin losses; for the
    multinomial loss (``multiclass``) the spectral bound ½ of its Hessian
    (:mod:`service.dp.optimize.multinomial`)."""
    if problem.task == "multiclass":
        return multinomial.CURVATURE
    return float(loss.c)


@dataclass(frozen=True, slots=True)
class MechanismPlan(Plan):
    """The typed plan of one single-dataset mechanism (``mechanism``): everything ``run``
    needs, decided by ``calibrate`` from public quantities. :meth:`calibration` renders the
    :class:`Calibration` (totals, record, composition) from the plan alone, so a plan stored
    at submission and rebuilt by the worker gives the very record the quote showed."""

    mechanism: ClassVar[str] = ""

    inputs: Inputs

    def calibration(self) -> Calibration:
        raise NotImplementedError

    def details(self) -> dict[str, Any]:
        """The calibration's record (the plan's public numbers)."""
        raise NotImplementedError

    @property
    def expected_noise_norm(self) -> float | None:
        """E‖noise‖ of the release, if the mechanism states one."""
        raise NotImplementedError

    def calibration_with(self, composition: str, *, delta: float = 0.0) -> Calibration:
        """The calibration of this plan: its (ε, δ) (δ = 0 for a pure ε-DP release), record
        and expected noise norm, with its ``composition`` sentence."""
        return Calibration(
            epsilon=float(self.inputs.epsilon),
            delta=float(delta),
            details=self.details(),
            expected_noise_norm=self.expected_noise_norm,
            composition=composition,
            plan=self,
        )


@dataclass(frozen=True, slots=True)
class ObjectivePlan(MechanismPlan):
    """What the objective-perturbation-style mechanisms share: the noise law of b (``noise``:
    ``"norm_exponential"`` with ``beta`` or ``"gaussian"`` with ``sigma``), the extra ridge
    Δ and the effective ridge λ + Δ, the objective's budget ε₁ and Jacobian part, the
    certified release plan (ε_r, τ, β_r) and when its certificate can fail."""

    noise: str
    beta: float | None
    sigma: float | None
    Delta: float
    effective_regularization: float
    epsilon_objective: float
    jacobian_epsilon: float
    certificate: certified.CertifiedRelease
    failure: certified_failure.CertificateFailure

    @property
    def dimension(self) -> int:
        """The dimension of b, that of the objective solved: d (dK for K classes, the
        projection's k for projected rows)."""
        return self.inputs.d

    @property
    def noise_beta(self) -> float:
        """β of the norm-exponential law (ValueError for a Gaussian plan)."""
        if self.noise != "norm_exponential" or self.beta is None:
            raise ValueError(f"a {type(self).kind} plan with {self.noise} noise has no β")
        return self.beta

    @property
    def noise_sigma(self) -> float:
        """σ of the Gaussian law (ValueError for a norm-exponential plan)."""
        if self.noise != "gaussian" or self.sigma is None:
            raise ValueError(f"a {type(self).kind} plan with {self.noise} noise has no σ")
        return self.sigma


@dataclass(frozen=True, slots=True)
class NormExponentialObjectivePlan(ObjectivePlan):
    """Objective perturbation's plans with norm-exponential noise b ∝ exp(−β‖b‖) in
    ℝ^:attr:`dimension` (binary, regression, K classes): ε₁ = ε′ + ε_J with β·S_g ≤ ε′ for
    the gradient sensitivity S_g = sup ‖∇ℓ(D) − ∇ℓ(D′)‖ of replace-one neighbours (the
    noise part of the change of variables b ↦ w), and the record they share. E‖b‖ = dim/β
    (‖b‖ ~ Gamma(dim, 1/β)); the released minimiser moves by at most E‖b‖/(n(λ + Δ))."""

    #: Whether the record names the noise dimension (K-class plans: dK ≠ d).
    shows_dimension: ClassVar[bool] = False

    epsilon_prime: float

    @classmethod
    def split(
        cls: type[NP],
        inputs: Inputs,
        *,
        extra: float,
        beta: float,
        split: tuple[float, float, float],
        certificate: certified.CertifiedRelease,
        failure: certified_failure.CertificateFailure,
    ) -> NP:
        """The plan with extra ridge Δ = ``extra`` (λ + Δ solved), noise rate β and
        ``split`` = (ε₁, ε′, ε_J), the objective's budget and its noise and Jacobian parts."""
        epsilon_objective, epsilon_prime, jacobian_epsilon = split
        return cls(
            inputs=inputs,
            noise="norm_exponential",
            beta=beta,
            sigma=None,
            Delta=float(extra),
            effective_regularization=inputs.regularization + extra,
            epsilon_objective=epsilon_objective,
            jacobian_epsilon=jacobian_epsilon,
            certificate=certificate,
            failure=failure,
            epsilon_prime=epsilon_prime,
        )

    @property
    def gradient_sensitivity(self) -> float:
        """S_g: 2 for a margin loss with |l′| ≤ 1 and ‖x‖ ≤ 1 (‖l′y x − l′′y′x′‖ ≤ 2)."""
        return 2.0

    @property
    def expected_noise_norm(self) -> float:
        return self.dimension / self.noise_beta

    def details(self) -> dict[str, Any]:
        n, beta, dim = self.inputs.n, self.noise_beta, self.dimension
        sensitivity, expected = self.gradient_sensitivity, self.expected_noise_norm
        details = self.inputs.details()
        details.update(delta=0.0, noise="norm_exponential")
        if self.shows_dimension:
            details.update(noise_dimension=dim)
        details.update(
            branch="no_extra_regularization" if self.Delta == 0.0 else "extra_regularization",
            epsilon_objective=self.epsilon_objective,
            epsilon_prime=self.epsilon_prime,
            Delta=self.Delta,
            effective_regularization=self.effective_regularization,
            beta=beta,
            gradient_sensitivity=sensitivity,
            noise_epsilon=sensitivity * beta,
            jacobian_epsilon=self.jacobian_epsilon,
            noise_norm_distribution=f"Gamma(shape={dim}, scale={1.0 / beta!r})",
            expected_noise_norm=expected,
            expected_coef_shift_bound=expected / (n * self.effective_regularization),
        )
        details.update(self.certificate.details())
        details.update(self.failure.details())
        return details


@dataclass(frozen=True, slots=True)
class OutputPlan(MechanismPlan):
    """What output perturbation's plans share (binary, regression, K classes): the certificate's
    tolerance τ = max(τ₀, 2F) (F its floor at b = 0), the L2 sensitivity S = S₀ + 2τ/λ of the
    released minimiser with its terms (each rounded up) and β = ε/S of the norm-exponential
    noise in ℝ^:attr:`dimension`. S₀ = 2L/(nλ) is the exact minimiser's sensitivity for an
    L-Lipschitz loss (CMS11 Cor. 8: the neighbours' objectives differ by G with ‖∇G‖ ≤ 2L/n
    and are λ-strongly convex) and 2τ/λ twice the distance τ/λ of a point with ‖∇J‖ ≤ τ to
    the exact minimiser (λ-strong convexity), so β·S ≤ ε exactly gives ε-DP."""

    #: Whether the record names the noise dimension (K-class plans: dK ≠ d).
    shows_dimension: ClassVar[bool] = False

    tolerance: float
    floor: float
    sensitivity: float
    sensitivity_exact_minimiser: float
    distance_to_exact_minimiser_bound: float
    sensitivity_certificate_term: float
    beta: float

    @classmethod
    def calibrated(
        cls: type[OP],
        problem: Problem,
        *,
        exact_sensitivity: Fraction,
        base_tolerance: float,
        floor: float,
    ) -> OP:
        """The plan of ``problem`` for the exact minimiser's sensitivity S₀ (a rational),
        the certificate's τ₀ and floor F: τ = max(τ₀, 2F), S = S₀ + 2τ/λ in exact rational
        arithmetic (τ and λ the doubles used) and β the largest double with β·S ≤ ε."""
        lam = Fraction(problem.regularization)
        tau = max(base_tolerance, 2.0 * floor)
        slack = 2 * Fraction(tau) / lam
        return cls(
            inputs=Inputs.of(problem),
            tolerance=float(tau),
            floor=float(floor),
            sensitivity=round_up(exact_sensitivity + slack),
            sensitivity_exact_minimiser=round_up(exact_sensitivity),
            distance_to_exact_minimiser_bound=round_up(Fraction(tau) / lam),
            sensitivity_certificate_term=round_up(slack),
            beta=float(scale_for(problem.epsilon, exact_sensitivity + slack)),
        )

    @property
    def dimension(self) -> int:
        """The dimension of the noise (d; dK for K classes)."""
        return self.inputs.d

    @property
    def expected_noise_norm(self) -> float:
        return self.dimension / self.beta

    def details(self) -> dict[str, Any]:
        dim, beta = self.dimension, self.beta
        details = self.inputs.details()
        details.update(delta=0.0, noise="norm_exponential")
        if self.shows_dimension:
            details.update(noise_dimension=dim)
        details.update(
            sensitivity=self.sensitivity,
            sensitivity_exact_minimiser=self.sensitivity_exact_minimiser,
            certificate_tolerance=self.tolerance,
            certificate_floor=self.floor,
            distance_to_exact_minimiser_bound=self.distance_to_exact_minimiser_bound,
            sensitivity_certificate_term=self.sensitivity_certificate_term,
            beta=beta,
            noise_norm_distribution=f"Gamma(shape={dim}, scale={1.0 / beta!r})",
            expected_noise_norm=self.expected_noise_norm,
            release=lattice.RELEASE_NOTE,
        )
        return details


def log1p_upper(x: Fraction) -> Fraction:
    """A rational ≥ ln(1 + x) for a rational x ≥ 0 (objective perturbation's Jacobian parts):
    x itself when x < 10⁻²⁰ (ln(1 + x) ≤ x, and x − ln(1 + x) ≤ x²/2 is far below an ulp);
    otherwise 1 + x and its logarithm in 60-digit decimals, each correctly rounded (≤ ½·10⁻⁵⁹
    relative), so within 10⁻⁵⁹·(1 + ln(1 + x)) ≤ 10⁻³⁹·ln(1 + x) of the real value, plus
    10⁻³⁸ relative."""
    if x < Fraction(1, 10**20):
        return x
    ctx = Context(prec=60)
    one_plus = ctx.divide(Decimal(x.numerator + x.denominator), Decimal(x.denominator))
    return Fraction(ctx.ln(one_plus)) * (1 + Fraction(1, 10**38))


def jacobian_slack(
    epsilon: float, regularization: float, n: int, c: float
) -> tuple[float, float, float]:
    """Split ε between the noise and the Jacobian of objective perturbation: (Δ, ε_n, ε_J).

    Tight Jacobian bound (replace-one neighbours, linear model). The change of variables
    b ↦ w has Jacobian ∇b_D(w) = −(M + l″_i x_i x_iᵀ) with M = Σ_{j≠i} l″_j x_j x_jᵀ +
    n(λ + Δ)I ⪰ n(λ + Δ)I shared by D and D′ (records j ≠ i agree). By the matrix
    determinant lemma det(M + uuᵀ) = det(M)(1 + uᵀM⁻¹u), so with u = √l″_i x_i and
    v = √l″′_i x′_i (‖u‖², ‖v‖² ≤ c):

        det(M + uuᵀ)/det(M + vvᵀ) = (1 + uᵀM⁻¹u)/(1 + vᵀM⁻¹v) ≤ 1 + c/(n(λ + Δ)),

    i.e. ε_J = ln(1 + c/(n(λ + Δ))), not CMS11 Lemma 10's 2 ln(·) (which allows a rank-2
    change of arbitrary sign). The noise gets ε_n = ε − ε_J, so the total loss is ε_n + ε_J = ε.

    Choice of Δ (no cliff). Among the two candidate splits — Δ = 0 (ε_n = ε − ln(1 + c/(nλ)))
    and the smallest Δ with ε_J = ε/2 (λ + Δ = c/(n(e^{ε/2} − 1)), ε_n = ε/2) — take the one
    with the larger noise budget ε_n, i.e. the smaller expected noise norm 2d/ε_n:
    Δ = 0 when ln(1 + c/(nλ)) ≤ ε/2, otherwise Δ = c/(n(e^{ε/2} − 1)) − λ > 0. Both agree at
    the threshold, so the noise is continuous in ε and never below half the budget (CMS11's
    rule leaves ε′ → 0 just above its threshold). ε_J is recomputed for the double λ + Δ
    actually used and rounded up (:func:`log1p_upper`), and ε_n is the largest double with
    ε_n + ε_J ≤ ε exactly, so floating-point rounding in Δ can only move budget and the
    rounding of ε_J and ε − ε_J never exceeds ε.
    """
    jacobian0 = math.log1p(c / (n * regularization))
    extra = 0.0
    if jacobian0 > epsilon / 2.0:
        # > 0 in exact arithmetic: ln(1 + c/(nλ)) > ε/2 ⇔ c/(n(e^{ε/2} − 1)) > λ
        extra = max(0.0, c / (n * math.expm1(epsilon / 2.0)) - regularization)
    jacobian = round_up(log1p_upper(Fraction(c) / (n * Fraction(regularization + extra))))
    epsilon_noise = remainder_within(epsilon, jacobian)
    if not epsilon_noise > 0.0:  # pragma: no cover - only reachable through rounding
        raise PrivacyParameterError(
            f"ε = {epsilon:g} leaves no budget for the noise after the Jacobian term"
        )
    return extra, epsilon_noise, jacobian


def chi_mean(d: int) -> float:
    """E‖g‖ for g ~ N(0, I_d): √2 Γ((d+1)/2)/Γ(d/2)."""
    return math.sqrt(2.0) * math.exp(special.gammaln((d + 1) / 2.0) - special.gammaln(d / 2.0))


def release(coef: NDArray[np.float64]) -> LinearModel:
    """Round the released weights to the public grid (docs/design.md §2) and wrap them."""
    return LinearModel(coef=noise.round_to_grid(np.asarray(coef, dtype=np.float64)))


def report(progress: ProgressCallback | None, fraction: float) -> None:
    if progress is not None:
        progress(fraction)


def require_plan(calibration: Calibration, kind: type[P]) -> P:
    """The typed plan a ``run`` executes: ``calibration.plan``, which must be a ``kind``
    (a calibration from this mechanism's ``calibrate`` or rebuilt from a stored plan)."""
    plan = calibration.plan
    if not isinstance(plan, kind):
        raise ValueError(
            f"the calibration carries no {kind.kind} plan "
            f"(got {type(plan).kind if plan is not None else 'none'})"
        )
    return plan


def noise_enclosure(plan: ObjectivePlan, rng: np.random.Generator | None) -> lattice.Enclosure:
    """A draw of the plan's objective noise b ∈ ℝ^:attr:`~ObjectivePlan.dimension`
    (norm-exponential with β, or Gaussian with σ), known as doubles with a proved enclosure
    (:mod:`service.dp.noise.lattice`)."""
    d = plan.dimension
    if plan.noise == "gaussian":
        return lattice.gaussian_enclosure(d, sigma=plan.noise_sigma, rng=rng)
    return lattice.norm_exponential_enclosure(d, beta=plan.noise_beta, rng=rng)


def certified_minimiser(
    X: NDArray[np.float64],
    y: NDArray[np.float64],
    plan: ObjectivePlan,
    *,
    regularization: float,
    rng: np.random.Generator | None,
    centre: NDArray[np.float64] | None = None,
    centre_weight: float = 0.0,
) -> NDArray[np.float64]:
    """The certified release (:mod:`service.dp.optimize.certified`) of an
    objective-perturbation-style plan: its noise enclosed, its extra ridge Δ, its certified
    release plan, and an optional public centre w₀ with weight η. ``regularization`` is the
    ridge λ of the objective solved: the plan's own λ, except for a centred objective whose
    plan was calibrated at λ + η (transfer), which solves λ and adds η through the centre."""
    loss = plan.inputs.loss_function()
    noise = noise_enclosure(plan, rng)
    return certified.release_minimiser(
        X,
        y,
        loss,
        regularization=regularization,
        extra_regularization=plan.Delta,
        noise=noise,
        release=plan.certificate,
        rng=rng,
        centre=centre,
        centre_weight=centre_weight,
    )


def certificate_failure(
    inputs: Inputs,
    plan_noise: tuple[str, float | None, float | None],
    certificate: certified.CertifiedRelease,
    *,
    mechanism: str,
    centre_norm: float = 0.0,
    check: bool = True,
    dimension: int | None = None,
) -> certified_failure.CertificateFailure:
    """When the certified release of an objective-perturbation-style plan can fail
    (:func:`service.dp.optimize.certified_failure.failure_plan`: the noise norm beyond which no
    double may meet the certificate and the probability of exceeding it, for the noise
    ``plan_noise`` = (law, β, σ)), after refusing (422, before any charge; unless ``check`` is
    False) a request for which that probability is above 10⁻³⁰ or no certifiable point is
    guaranteed even without noise
    (:func:`service.dp.optimize.certified_failure.check_failure_probability`). ``dimension``
    is that of the objective solved and of b (d unless the rows are projected to ℝ^k)."""
    law, beta, sigma = plan_noise
    dim = inputs.d if dimension is None else int(dimension)
    if law == "gaussian":
        tail = partial(certified_failure.gaussian_tail_log10, dim, float(sigma or 0.0))
    else:
        tail = partial(certified_failure.norm_exponential_tail_log10, dim, float(beta or 0.0))
    failure = certified_failure.failure_plan(
        n=inputs.n,
        d=dim,
        loss=inputs.loss_function(),
        strong_convexity=certificate.strong_convexity,
        tolerance=certificate.tolerance,
        centre_norm=centre_norm,
        log10_tail=tail,
    )
    if check:
        certified_failure.check_failure_probability(failure.details(), mechanism)
    return failure
