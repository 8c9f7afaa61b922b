"""When a certified release can fail, from public quantities only.

Some double meets the certificate (proved gradient bound ≤ τ) whenever the *certificate floor*
F(q), a public bound affine in the noise norm q = ‖b̂‖/n, is ≤ τ; a noise norm beyond the
feasible norm T (F(T) = τ) may leave no certifiable point. This module computes F and T, the
probability that the noise norm exceeds T (the ``certificate_failure`` record), and refuses a
request for which it is above 10⁻³⁰. The release itself is :mod:`service.dp.optimize.certified`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from scipy import special

from service.dp.core.losses import HuberLoss, LogisticLoss, Loss
from service.dp.core.plan import Plan, plan_kind
from service.dp.core.validation import PrivacyParameterError
from service.dp.noise import lattice
from service.dp.noise.lattice.fast import LN2_LO
from service.dp.noise.rounding import KAPPA, UNIT_ROUNDOFF, gamma
from service.dp.optimize.certified import _DEGREE, _TINY, BLOCK_ROWS

__all__ = [
    "MAX_FAILURE_LOG10",
    "NOISE_RADIUS_RATIO",
    "CertificateFailure",
    "certificate_floor",
    "check_failure_probability",
    "derivative_error_bound",
    "failure_at",
    "failure_details",
    "failure_plan",
    "failure_sentence",
    "feasible_noise_norm",
    "gaussian_tail_log10",
    "largest_feasible",
    "norm_exponential_tail_log10",
    "probability_text",
]


#: ‖b − b̂‖ ≤ this·‖b̂‖ for every enclosure (lattice.ENCLOSURE_RELATIVE per coordinate, ×2)
NOISE_RADIUS_RATIO: Final[float] = 2.0 * lattice.ENCLOSURE_RELATIVE
#: a bound on a public bound: covers the (1 + O(u)) factors and this module's own roundings
_SAFE: Final[float] = 1.0 + 2.0**-30


def derivative_error_bound(loss: Loss, margin_bound: float) -> float:
    """A public bound on every e_i of
    :func:`~service.dp.optimize.certified.loss_derivative_enclosure` at margins |m| ≤
    ``margin_bound``. Logistic: |E − e^v| ≤ 2^k(1.5γ₂₇ + 2⁻⁵⁷ + 1.5e_r) + 2⁻¹⁰⁷⁴ with k ≤ 0, e_r ≤
    u(|k|·LN2_LO + 0.35) + |k|2⁻⁸⁶ and 2^k|k| ≤ ½, then + 2.01u|l̂′| (|l̂′| ≤ 1), i.e. about 43u
    whatever the margin. Huber: 4u(c(1 + h + |a − m|) + |l̂′|) with
    |a − m| ≤ (1 + h)(1 + u) + |m|."""
    u = UNIT_ROUNDOFF
    if isinstance(loss, LogisticLoss):
        e_r = u * 0.35 + 0.5 * (u * LN2_LO + 2.0**-86)
        e_exp = (1.5 * gamma(2 * _DEGREE + 1) + 2.0**-57 + 1.5 * e_r) * KAPPA * (1 + 2 * u)
        return (e_exp + _TINY + 2.01 * u) * KAPPA * _SAFE
    if isinstance(loss, HuberLoss):
        h = float(loss.h)
        gap = (1.0 + h) * (1.0 + u) + margin_bound
        return 4.0 * u * (float(loss.c) * (1.0 + h + gap) + 1.0) * KAPPA * _SAFE
    raise ValueError(f"no certified derivative for the loss {loss.name!r}")


def certificate_floor(
    *,
    n: int,
    d: int,
    loss: Loss,
    strong_convexity: float,
    noise_norm: float,
    centre_norm: float = 0.0,
) -> float:
    """F(q): a public upper bound on the proved bound G of
    :func:`~service.dp.optimize.certified.gradient_bound` at the double ŵ nearest θ = argmin J̃_b,
    for ‖b̂‖/n = q = ``noise_norm`` (and η‖w₀‖ = ``centre_norm``). If F(q) ≤ τ, a double meeting the
    certificate exists.

    With s = 1 + q(1 + ρ_b) + η‖w₀‖ (ρ_b = ``NOISE_RADIUS_RATIO``, so ‖b/n − ηw₀‖ ≤ s − 1):
    μθ is minus (1/n)Σl′y x + b/n − ηw₀, so ‖θ‖ ≤ s/μ and ‖ŵ‖ ≤ W = s(1 + 2u)/μ; ŵ is θ
    rounded componentwise (‖ŵ − θ‖ ≤ u‖θ‖ + √d·2⁻¹⁰⁷⁴) and ∇J̃_b is (c + μ)-Lipschitz, so
    ‖∇J̃_b(ŵ)‖ ≤ (c + μ)(u·s/μ + √d·2⁻¹⁰⁷⁴). The bound is G = ‖ĝ‖ + e ≤ ‖∇J̃_b(ŵ)‖ + 2e, and e (the
    terms of :func:`~service.dp.optimize.certified.loss_gradient_sum` and
    :func:`~service.dp.optimize.certified.gradient_bound`, each at its worst: |l̂′| ≤ 1, ‖x_i‖ ≤ 1,
    |m_i| ≤ W(1 + γ_d)) is at most

        γ_B(1 + 2γ_n) + [n > B](2u + γ²_m)·1.01 + ē(1 + 2γ_n) + cγ_dW       (loss sum / n)
        + u·1.01 + (2u + γ₂)μW + u(2η‖w₀‖ + ‖p‖) + uq + ρ_b q + u(2‖p‖ + η‖w₀‖ + q)

    with ‖p‖ ≤ 1.01 + μW (the partial sums), ē = :func:`derivative_error_bound`, B = 4096 and
    m = ⌈n/B⌉, all times κ and a safety factor. F is affine in q."""
    u = UNIT_ROUNDOFF
    mu = strong_convexity * (1.0 - 4.0 * u)
    q = noise_norm
    s = 1.0 + q * (1.0 + NOISE_RADIUS_RATIO) + centre_norm
    width = s * (1.0 + 2.0 * u) / mu
    mu_hat = strong_convexity * (1.0 + 4.0 * u)
    c = float(loss.c)
    rows = min(n, BLOCK_ROWS)
    blocks = -(-n // BLOCK_ROWS)
    up = 1.0 + 2.0 * gamma(n)
    e_bar = derivative_error_bound(loss, width * (1.0 + gamma(d)))
    combine = (2.0 * u + gamma(blocks) ** 2) * 1.01 if n > BLOCK_ROWS else 0.0
    loss_sum = (
        gamma(rows) * (1.0 + 2.0 * u) * up + combine + e_bar * up + c * gamma(d) * width
    ) * KAPPA
    partial = 1.01 + mu_hat * width
    tail = (
        u * 1.01
        + (2.0 * u + gamma(2)) * mu_hat * width
        + u * (2.0 * centre_norm + partial)
        + u * q
        + NOISE_RADIUS_RATIO * q
        + u * (2.0 * partial + centre_norm + q)
    )
    error = (loss_sum + tail) * KAPPA
    # θ rounded to doubles: u relative per coordinate, or 2⁻¹⁰⁷⁵ where subnormal
    rounding = (c + mu_hat) * (u * s / mu + math.sqrt(d) * _TINY)
    return (rounding + 2.0 * error) * _SAFE


def feasible_noise_norm(
    *,
    n: int,
    d: int,
    loss: Loss,
    strong_convexity: float,
    tolerance: float,
    centre_norm: float = 0.0,
) -> float:
    """q* = the largest ‖b̂‖/n with :func:`certificate_floor` ≤ τ (F is affine in q), or −1
    when even b = 0 leaves no double that meets the certificate (then the request must be
    refused before any charge)."""
    terms: dict[str, Any] = {
        "n": n,
        "d": d,
        "loss": loss,
        "strong_convexity": strong_convexity,
        "centre_norm": centre_norm,
    }
    return largest_feasible(lambda q: certificate_floor(noise_norm=q, **terms), tolerance)


def largest_feasible(floor: Callable[[float], float], tolerance: float) -> float:
    """q* = the largest q ≥ 0 with ``floor(q)`` ≤ τ for a floor F affine in q (any of the
    certificate floors: margin, regression, multinomial), or −1 when F(0) > τ. From the
    secant slope (F(1) − F(0)) taken up by a safety factor, the root is approached from
    below and stepped down (by 2⁻²⁰ relative) until F(q) ≤ τ holds in floating point."""
    at_zero = floor(0.0)
    if not at_zero <= tolerance:
        return -1.0
    slope = (floor(1.0) - at_zero) * _SAFE
    q = (tolerance - at_zero) / slope * (1.0 - 2.0**-30)
    while q > 0.0 and floor(q) > tolerance:
        q *= 1.0 - 2.0**-20
    return max(q, 0.0)


def failure_at(n: int, q: float, log10_tail: Callable[[float], float]) -> CertificateFailure:
    """The failure plan for the feasible ‖b̂‖/n = q (:func:`largest_feasible`): the noise
    norm T = n·q(1 − 2ρ_b) (‖b̂‖ ≤ ‖b‖/(1 − ρ_b)) and ``log10_tail(T)`` ≥ log₁₀ P[‖b‖ > T]."""
    threshold = n * q * (1.0 - 2.0 * NOISE_RADIUS_RATIO)
    return CertificateFailure(
        noise_norm_threshold=float(threshold), log10_probability_bound=float(log10_tail(threshold))
    )


def norm_exponential_tail_log10(d: int, beta: float, t: float) -> float:
    """An upper bound on log₁₀ P[‖b‖ > t] for b ∝ exp(−β‖b‖) on ℝ^d (‖b‖ ~ Gamma(d, 1/β)):
    Q(d, x) with x = βt, from scipy while it is above 10⁻³⁰⁰ (times 1 + 10⁻⁹ for its own
    error), else Γ(d, x)/Γ(d) ≤ x^{d−1}e^{−x}·x/((x − d + 1)Γ(d)) (x > d − 1), in logs."""
    x = beta * t
    if not x > 0.0:
        return 0.0
    tail = float(special.gammaincc(d, x))
    if tail > 1e-300:
        return min(0.0, math.log10(tail * (1.0 + 1e-9)))
    if not x > d - 1.0:  # pragma: no cover - the tail is not tiny there
        return 0.0
    log_tail = (d - 1) * math.log(x) - x + math.log(x / (x - d + 1.0)) - math.lgamma(d)
    return min(0.0, log_tail / math.log(10.0) + 1e-9)


def gaussian_tail_log10(d: int, sigma: float, t: float) -> float:
    """An upper bound on log₁₀ P[‖b‖ > t] for b ~ N(0, σ²I_d): ‖·‖ is 1-Lipschitz and
    E‖b‖ ≤ σ√d, so P ≤ exp(−(t/σ − √d)²/2) for t > σ√d (Gaussian concentration)."""
    excess = t / sigma - math.sqrt(d)
    if not excess > 0.0:
        return 0.0
    return -(excess * excess) / 2.0 / math.log(10.0)


def probability_text(log10_p: float) -> str:
    """``≤ 3.2e-20`` while representable as a double, else ``≤ 10^-4342`` (rounded up)."""
    if log10_p > -300.0:
        return f"≤ {10.0**log10_p:.2g}"
    return f"≤ 10^{math.ceil(log10_p)}"


@plan_kind("certificate_failure")
@dataclass(frozen=True, slots=True)
class CertificateFailure(Plan):
    """When a certified release can fail (:func:`failure_plan`): the noise norm T above which
    no double may meet the certificate and log₁₀ of a bound on P[‖b‖ > T]; part of the
    typed plan of every objective-perturbation-style mechanism. :meth:`details` is its record."""

    noise_norm_threshold: float
    log10_probability_bound: float

    def details(self) -> dict[str, Any]:
        return {
            "certificate_failure": {
                "noise_norm_threshold": self.noise_norm_threshold,
                "log10_probability_bound": self.log10_probability_bound,
                "probability": probability_text(self.log10_probability_bound),
                "note": (
                    "a double meeting the certificate exists whenever ‖b‖ ≤ "
                    "noise_norm_threshold; the noise exceeds it with the probability shown, "
                    "which is not charged as δ; below it a failure (nothing released, charge "
                    "kept) needs the solver not to converge, which the guarantee does not cover"
                ),
            }
        }


def failure_plan(
    *,
    n: int,
    d: int,
    loss: Loss,
    strong_convexity: float,
    tolerance: float,
    centre_norm: float,
    log10_tail: Callable[[float], float],
) -> CertificateFailure:
    """When the certificate can fail: the noise norm T = n·q*(1 − ρ_b) above which no double
    may meet it (:func:`feasible_noise_norm`; ‖b̂‖ ≤ ‖b‖/(1 − ρ_b)) and an upper bound on
    P[‖b‖ > T] from ``log10_tail``. Below T a failure needs the solver not to converge
    (docs/privacy.md)."""
    q = feasible_noise_norm(
        n=n,
        d=d,
        loss=loss,
        strong_convexity=strong_convexity,
        tolerance=tolerance,
        centre_norm=centre_norm,
    )
    return failure_at(n, q, log10_tail)


def failure_details(
    *,
    n: int,
    d: int,
    loss: Loss,
    strong_convexity: float,
    tolerance: float,
    centre_norm: float,
    log10_tail: Callable[[float], float],
) -> dict[str, Any]:
    """The record of :func:`failure_plan` (``{"certificate_failure": {...}}``)."""
    return failure_plan(
        n=n,
        d=d,
        loss=loss,
        strong_convexity=strong_convexity,
        tolerance=tolerance,
        centre_norm=centre_norm,
        log10_tail=log10_tail,
    ).details()


#: a request whose certificate can fail with a larger (public) probability is refused
MAX_FAILURE_LOG10: Final[float] = -30.0


def check_failure_probability(failure: Mapping[str, Any], mechanism: str) -> None:
    """Refuse (:class:`PrivacyParameterError`, a 422 before any charge) a calibration whose
    certificate may be infeasible even without noise, or infeasible with probability above
    10^``MAX_FAILURE_LOG10``; decided from the public numbers of :func:`failure_details`."""
    got = failure["certificate_failure"]
    if got["noise_norm_threshold"] < 0.0:
        raise PrivacyParameterError(
            f"{mechanism}: with these public parameters no minimiser can be certified to the "
            "tolerance its release assumes (rounding of the loss derivative at large "
            "coefficients); use more features, the logistic loss or a larger regularization"
        )
    if got["log10_probability_bound"] > MAX_FAILURE_LOG10:
        raise PrivacyParameterError(
            f"{mechanism}: with these public parameters the certificate may fail with "
            f"probability {got['probability']} (above 1e-30); use a larger regularization or "
            "epsilon"
        )


def failure_sentence(failure: Mapping[str, Any]) -> str:
    """The record's words for :func:`failure_details`."""
    got = failure["certificate_failure"]
    return (
        f"The certificate can be out of reach only if ‖b‖ > {got['noise_norm_threshold']:.6g}, "
        f"probability {got['probability']} (not charged as δ); otherwise a failure (nothing "
        "released, charge kept) needs the solver not to converge"
    )
