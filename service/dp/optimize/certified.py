"""Certified minimiser release: objective perturbation whose guarantee holds for the doubles.

Why (issue 19 §1). Objective perturbation's proof (CMS11 Thm 9, KST12, GOP) is about the
*exact* minimiser θ of the perturbed objective J̃_b(w) = J(w) + bᵀw/n + (Δ/2)‖w‖² for a *real*
noise vector b with a density. A floating-point implementation draws b as doubles, whose law
has no density, and returns an approximate minimiser; the change-of-variables argument covers
neither. PrivFit therefore releases

    o = γ·round((ŵ + Z)/γ),   Z ∝ exp(−β_r‖z‖)  (exact lattice release, :mod:`lattice`),

where ŵ is the solver's answer on a double b̂ that encloses the real b, and the release noise Z
covers the certified distance between ŵ and θ.

The mechanism, in exact arithmetic (what the proof is about):

1. real uniforms U define the real noise b = F(U) with exactly the law the calibration needs
   (norm-exponential or Gaussian; :func:`lattice.norm_exponential_enclosure`); the service
   knows b as doubles b̂ with a *proved* bound ‖b − b̂‖ ≤ e_b;
2. θ = argmin J̃_b (never computed): ε₁-DP (or (ε₁, δ)) by the mechanism's own proof, run at
   ε₁ = ε − ε_r;
3. the solver minimises J̃_b̂ and returns ŵ; :func:`gradient_bound` proves
   ‖∇J̃_b(ŵ)‖ ≤ G (IEEE-754 error analysis below, for the *real* b and the real λ + Δ + η);
   the release goes ahead only if G ≤ τ, a public tolerance, and then ‖ŵ − θ‖ ≤ τ/μ = r by
   μ-strong convexity (μ‖ŵ − θ‖² ≤ ⟨∇J̃_b(ŵ) − ∇J̃_b(θ), ŵ − θ⟩ ≤ G‖ŵ − θ‖);
4. o as above with β_r = ε_r/(2r).

Privacy (adaptive composition). Step 2 releases θ with ε₁. Given θ and D, the rest is a
randomised function M₂(D, θ): the uniforms given b = b_D(θ) = −n∇[J_D + (Δ/2)‖·‖²](θ) (a law
that does not depend on D beyond b), the solver's ŵ, and Z. Whatever ŵ is, ‖ŵ − θ‖ ≤ r; for
a neighbour D′ the same holds with θ unchanged, so the two centres of the final noise are
within 2r of each other for every realisation, and for every set O of outputs
P[c + Z ∈ C(O)] ≤ e^{2rβ_r}·P[c′ + Z ∈ C(O)] = e^{ε_r}·P[c′ + Z ∈ C(O)]; averaging over the
centres (mixtures) gives P[M₂(D, θ) ∈ O] ≤ e^{ε_r}P[M₂(D′, θ) ∈ O]. Composition gives
(ε₁ + ε_r, δ) for (θ, o); o alone is post-processing. Rounding to the grid is part of the exact
lattice release, so the bound holds for the released doubles.

If the certificate fails (G > τ after a second, tighter solve), the job fails with
:class:`~service.dp.optimize.solvers.ConvergenceError` and nothing is released; the guarantee above
is for the runs that release. When can it fail (issue 25 §3)? That is the subject of
:mod:`service.dp.optimize.certified_failure`: a public bound F(q) on G at the double nearest θ
for ‖b̂‖/n = q (the certificate floor), so a certifiable double exists while F(q) ≤ τ, i.e.
‖b‖ ≤ T = n·q*(1 − 2ρ_b), and the noise exceeds T with a public probability (usually far below
10⁻¹⁰⁰⁰, typically tens to hundreds of times the quantile L behind τ). Past that, only the
solver's not converging (a data-dependent event, not covered) can fail a certificate. Requests
with no certifiable point at b = 0 or a failure probability above 10⁻³⁰ are refused before any
charge (:func:`~service.dp.optimize.certified_failure.check_failure_probability`,
docs/privacy.md).

The split. The expected coefficient shift is ≈ A/ε₁ from the objective's noise
(A = 2d/(nμ) for the norm-exponential law) plus 2dτ/(μ ε_r) from Z; their sum is smallest at
ε_r/ε₁ = √(nτ). PrivFit takes ε_r = ε·κ, κ = √(nτ₀)/(1 + √(nτ₀)) with
τ₀ = 10⁻¹⁰ + 8(min(n, B) + d)u (B = 4096 rows per block of the certified gradient sum),
the part of τ that depends on n and d only (so the split is a function of n and d; on Adult
κ ≈ 0.0018, at n = 60 about 8·10⁻⁵).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.dp.core.accounting import remainder_within
from service.dp.core.losses import HuberLoss, LogisticLoss, Loss
from service.dp.core.plan import Plan, plan_kind
from service.dp.noise import lattice
from service.dp.noise.lattice.fast import LN2_HI, LN2_LO
from service.dp.noise.rounding import KAPPA, UNIT_ROUNDOFF, compensated_row_sums, gamma, norm_up
from service.dp.optimize.solvers import ConvergenceError, FinalPass, solve_erm

__all__ = [
    "BLOCK_ROWS",
    "RELEASE_FAILURE",
    "SENSITIVITY_FAILURE",
    "CertifiedRelease",
    "CertifiedSolve",
    "base_tolerance",
    "block_total",
    "certified_erm",
    "certified_solve",
    "exp_enclosure",
    "first_certified",
    "gaussian_quantile",
    "gradient_bound",
    "gradient_bound_from_pass",
    "loss_derivative_enclosure",
    "loss_gradient_sum",
    "noise_free",
    "norm_exponential_quantile",
    "perturbed",
    "plan",
    "release_minimiser",
    "release_share",
    "split",
    "split_epsilon",
    "tolerance",
]

FloatArray = NDArray[np.float64]

#: the solver's own (non-rigorous) target is this fraction of τ
_SOLVER_SHARE: Final[float] = 0.25
#: Why nothing is released when a noise-free minimiser (output perturbation) is not certified.
SENSITIVITY_FAILURE: Final[str] = (
    "the minimiser could not be certified to the tolerance the sensitivity assumes; "
    "no model was released"
)
#: Why nothing is released when the perturbed objective's minimiser is not certified.
RELEASE_FAILURE: Final[str] = (
    "the perturbed objective's minimiser could not be certified to the tolerance its "
    "release assumes; no model was released"
)
#: base tolerance per unit of (1 + ‖g‖) (the solver's DEFAULT_TOLERANCE)
_BASE: Final[float] = 1e-10
#: the largest share of ε the release noise may take
_MAX_SHARE: Final[float] = 0.5
#: rows per block of the certified gradient sum (its rounding bound is γ_B, not γ_n; larger
#: blocks keep BLAS efficient: 1024, 2048, 4096 and 8192 rows cost 6.6, 6.3, 5.5 and 5.3 ms on
#: Adult, one thread)
BLOCK_ROWS: Final[int] = 4096

# exp: ln 2 split as in service.dp.noise.lattice.fast (LN2_HI has 32 significant bits), Taylor
# degree 13
_INV_LN2: Final[float] = 1.4426950408889634
_DEGREE: Final[int] = 13
_TAYLOR: Final[tuple[float, ...]] = tuple(1.0 / math.factorial(j) for j in range(_DEGREE + 1))
#: below this, e^v < 2⁻¹⁰⁷⁴ (2⁻¹⁰⁷⁴ ≈ e^−744.44; e^−745.13 ≈ 2⁻¹⁰⁷⁵, half of it)
_EXP_FLOOR: Final[float] = -746.0
_TINY: Final[float] = 2.0**-1074


# ---- elementary functions with proved error bounds -----------------------------------------


def exp_enclosure(v: FloatArray) -> tuple[FloatArray, FloatArray]:
    """e^v and a bound on |result − e^v| for doubles v ≤ 0, from IEEE +, −, ×, ÷ only.

    v < −746: 0 with bound 2⁻¹⁰⁷⁴ (e^v is smaller). Otherwise v = k ln 2 + r, k = rint(v/ln 2)
    (−1077 ≤ k ≤ 0): r_hi = v − k·LN2_HI is exact (k·LN2_HI needs ≤ 43 bits; for k ≠ 0,
    v/(k·LN2_HI) ∈ [½, 2], Sterbenz), r̂ = fl(r_hi − fl(k·LN2_LO)) with
    |r̂ − r| ≤ u(|k|LN2_LO + |r̂|) + |k|·2⁻⁸⁶ =: e_r (the split's own error ≤ 2⁻⁸⁶ per ln 2),
    |r| ≤ 0.3466 + 2⁻²⁰. p̂ = Horner's Σ_{j≤13} r̂ʲ/j! has |p̂ − p(r̂)| ≤ γ₂₇·e^{|r̂|} (Higham
    Thm 5.3, the coefficients' own rounding included as one more u), truncation
    ≤ 0.3467¹⁴/14!·e^{0.35} < 2⁻⁵⁷, and |e^{r̂} − e^r| ≤ 1.5·e_r. e^v = 2^k·e^r, and ldexp is
    exact unless the result is subnormal (then ≤ 2⁻¹⁰⁷⁵ more):

        |Ê − e^v| ≤ 2^k·(γ₂₇·1.5 + 2⁻⁵⁷ + 1.5·e_r) + 2⁻¹⁰⁷⁴.
    """
    v = np.asarray(v, dtype=np.float64)
    low = v < _EXP_FLOOR
    safe = np.where(low, 0.0, v)
    k = np.rint(safe * _INV_LN2)
    r = (safe - k * LN2_HI) - k * LN2_LO
    p = np.full_like(r, _TAYLOR[-1])
    for c in reversed(_TAYLOR[:-1]):
        p *= r
        p += c
    e_r = UNIT_ROUNDOFF * (np.abs(k) * LN2_LO + np.abs(r)) + np.abs(k) * 2.0**-86
    e_p = (gamma(2 * _DEGREE + 1) * 1.5 + 2.0**-57 + 1.5 * e_r) * KAPPA
    ki = k.astype(np.int64)
    out = np.where(low, 0.0, np.ldexp(p, ki))
    err = np.where(low, _TINY, np.ldexp(e_p, ki) * (1.0 + 2.0 * UNIT_ROUNDOFF) + _TINY)
    return out, err


def loss_derivative_enclosure(loss: Loss, m: FloatArray) -> tuple[FloatArray, FloatArray]:
    """l′(m) for the margins m (doubles) and a bound on |result − l′(m)|.

    Logistic: l′(m) = −E/(1 + E) with E = e^{−m} for m ≥ 0, −1/(1 + E) with E = e^{m} for
    m < 0; both maps have |∂/∂E| ≤ 1, so the error is e_E + 2.01u·|l̂′| (two roundings).
    Huber (width h, c = 1/(2h)): −1 below a₂ = fl(1 − h), 0 above a = fl(1 + h),
    −fl(fl(a − m)/(2h)) between (2h exact). l′ is c-Lipschitz in its threshold and argument,
    so using a, a₂ instead of 1 ± h costs ≤ c·u(1 + h) each, and the formula's roundings
    ≤ c·u|a − m| + u|l̂′|: in all ≤ 4u·(c(1 + h + |a − m|) + |l̂′|).
    """
    m = np.asarray(m, dtype=np.float64)
    if isinstance(loss, LogisticLoss):
        e, e_err = exp_enclosure(-np.abs(m))
        one_plus = 1.0 + e
        out = np.where(m >= 0.0, -(e / one_plus), -(1.0 / one_plus))
        return out, (e_err + 2.01 * UNIT_ROUNDOFF * np.abs(out)) * KAPPA
    if isinstance(loss, HuberLoss):
        h = float(loss.h)
        top, bottom = 1.0 + h, 1.0 - h
        gap = top - m
        mid = -(gap / (2.0 * h))
        out = np.where(m > top, 0.0, np.where(m < bottom, -1.0, mid))
        err = 4.0 * UNIT_ROUNDOFF * (loss.c * (1.0 + h + np.abs(gap)) + np.abs(out))
        return out, err * KAPPA
    raise ValueError(f"no certified derivative for the loss {loss.name!r}")


# ---- the certificate ------------------------------------------------------------------------


def loss_gradient_sum(
    X: FloatArray, y: FloatArray, loss: Loss, w: FloatArray
) -> tuple[FloatArray, float]:
    """t̂ ≈ t = Σ_i l′(y_i x_iᵀw) y_i x_i and a proved bound on ‖t̂ − t‖₂.

    Needs ‖x_i‖ ≤ 1 (validated for every design) and y_i ∈ {−1, +1}. Error analysis (u = 2⁻⁵³,
    γ_k = ku/(1 − ku); BLAS in any order, with or without FMA):

    * ẑ = Xw: |ẑ_i − x_iᵀw| ≤ γ_d Σ_j|x_ij||w_j| ≤ γ_d‖x_i‖‖w‖ ≤ γ_d‖w‖ =: e_z; the margins
      y_iẑ_i are exact;
    * l̂′_i within e_i of l′(y_iẑ_i) (:func:`loss_derivative_enclosure`), so within e_i + c·e_z
      of l′ at the true margin (l′ is c-Lipschitz); these errors of s_i = y_i l̂′_i move the
      exact sum by ≤ Σ_i(e_i + c·e_z)‖x_i‖ ≤ Σe_i + n·c·e_z;
    * t̂ is summed in blocks of at most B = ``BLOCK_ROWS`` rows, P_k = X_kᵀs_k by BLAS, then the
      m block vectors by compensated summation: componentwise
      |P̂_kj − P_kj| ≤ γ_B Σ_{i∈k}|x_ij||s_i| and |t̂_j − Σ_k P̂_kj| ≤ u|t̂_j| + γ²_{m−1}Σ_k|P̂_kj|;
      in ℓ₂ the first is ≤ γ_B Σ_i|s_i|‖x_i‖ ≤ γ_B Σ|s_i|, so the bound grows with the block
      size, not with n.

    So ‖t̂ − t‖ ≤ γ_B Σ|s_i| + ‖u|t̂| + γ²_{m−1}Σ_k|P̂_k|‖ + Σe_i + n·c·e_z (sums of
    nonnegative terms taken up by 2γ_n), times κ = 1 + 2⁻²⁰.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    n, d = X.shape
    e_z = gamma(d) * norm_up(w)
    parts = []
    abs_s = 0.0
    sum_e = 0.0
    # one pass over X: each block is read for X_k w and again, from cache, for X_kᵀs_k
    for start in range(0, n, BLOCK_ROWS):
        block = X[start : start + BLOCK_ROWS]
        yb = y[start : start + BLOCK_ROWS]
        derivative, e_derivative = loss_derivative_enclosure(loss, yb * (block @ w))
        s = yb * derivative
        parts.append(block.T @ s)
        abs_s += float(np.abs(s).sum())
        sum_e += float(e_derivative.sum())
    t, combine = block_total(parts)
    # the sums of nonnegative terms above: ≤ γ_n relative each, block totals ≤ γ_m more
    up = 1.0 + 2.0 * gamma(n)
    gamma_b = gamma(min(n, BLOCK_ROWS))
    error = gamma_b * abs_s * up + combine + sum_e * up
    return t, (error + n * float(loss.c) * e_z) * KAPPA


def block_total(parts: list[FloatArray]) -> tuple[FloatArray, float]:
    """(t̂, e): the sum of the per-block vectors P̂_k (each a BLAS product over ≤ B rows),
    added by compensated summation when there are m > 1 blocks, and a proved bound e on
    ‖t̂ − Σ_k P̂_k‖ (0 for one block; otherwise the norm, rounded up, of the per-coordinate
    bounds u|t̂_j| + γ²_{m−1}Σ_k|P̂_kj|, :func:`~service.dp.noise.rounding.compensated_row_sums`)."""
    if len(parts) == 1:
        return parts[0], 0.0
    t, per_column = compensated_row_sums(np.stack(parts, axis=1))
    return t, norm_up(per_column)


def gradient_bound(
    X: FloatArray,
    y: FloatArray,
    loss: Loss,
    w: FloatArray,
    *,
    regularization: float,
    extra_regularization: float,
    noise: lattice.Enclosure,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
) -> float:
    """A proved upper bound on ‖∇J̃_b(w)‖ for the real b enclosed by ``noise`` and
    J̃_b(w) = (1/n)Σ l(y_i x_iᵀw) + ((λ + Δ + η)/2)‖w‖² − ηw₀ᵀw + bᵀw/n (real λ + Δ + η).

    The loss part t̂ and its bound e_t are :func:`loss_gradient_sum`'s; then
    â = t̂/n (+u‖â‖); v = fl(μ̂w) with μ̂ = fl(fl(λ + Δ) + η) (|μ̂ − μ| ≤ γ₂μ̂):
    +u‖v‖ + γ₂μ̂‖w‖; c₀ = fl(ηw₀): +u‖c₀‖; β̂ = fl(b̂/n): +u‖β̂‖ + e_b/n; and
    ĝ = ((â + v) − c₀) + β̂, each addition +u‖partial sum‖. The bound is ‖ĝ‖ (rounded up)
    plus the sum of these times κ = 1 + 2⁻²⁰.
    """
    w = np.asarray(w, dtype=np.float64)
    n = int(np.shape(X)[0])
    t, e_t = loss_gradient_sum(X, y, loss, w)
    return _bound_from_loss_sum(
        t,
        e_t,
        w,
        n=n,
        regularization=regularization,
        extra_regularization=extra_regularization,
        noise=noise,
        centre=centre,
        centre_weight=centre_weight,
    )


def gradient_bound_from_pass(
    final: FinalPass,
    loss: Loss,
    w: FloatArray,
    *,
    n: int,
    regularization: float,
    extra_regularization: float,
    noise: lattice.Enclosure,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
) -> float:
    """:func:`gradient_bound` from the solver's own last pass at w (:class:`FinalPass`), with
    O(n) work instead of two more passes over X. The solver's l̂′_i (not proved) are compared
    with the proved enclosure at the same margins ẑ_i: l′ at the true margin is within
    |l̂′_i − ℓ̂_i| (computed, taken up by 2u) + e_i + c·e_z of l̂′_i, e_z the pass's
    margin error; its sum t̂ is within γ_{rows + blocks}·Σ|l̂′_i| of Σ y_i l̂′_i x_i (‖x_i‖ ≤ 1).
    So ‖t̂ − t‖ ≤ γ_{rows+blocks}Σ|l̂′_i| + Σ_i(|l̂′_i − ℓ̂_i|(1 + 2u) + e_i) + n·c·e_z, and
    the rest is :func:`gradient_bound`'s."""
    w = np.asarray(w, dtype=np.float64)
    enclosed, e_enclosed = loss_derivative_enclosure(loss, final.margins)
    gap = np.abs(final.derivatives - enclosed)
    up = 1.0 + 2.0 * gamma(n)
    e_t = (
        gamma(final.block_rows + final.blocks) * float(np.abs(final.derivatives).sum()) * up
        + (float(gap.sum()) * (1.0 + 2.0 * UNIT_ROUNDOFF) + float(e_enclosed.sum())) * up
        + n * float(loss.c) * final.margin_error
    ) * KAPPA
    return _bound_from_loss_sum(
        final.loss_sum,
        e_t,
        w,
        n=n,
        regularization=regularization,
        extra_regularization=extra_regularization,
        noise=noise,
        centre=centre,
        centre_weight=centre_weight,
    )


def _bound_from_loss_sum(
    t: FloatArray,
    e_t: float,
    w: FloatArray,
    *,
    n: int,
    regularization: float,
    extra_regularization: float,
    noise: lattice.Enclosure,
    centre: FloatArray | None,
    centre_weight: float,
) -> float:
    """The tail of :func:`gradient_bound`: from t̂ within e_t of the loss sum to ‖∇J̃_b(w)‖."""
    a = t / n
    mu = (regularization + extra_regularization) + centre_weight
    v = mu * w
    b_scaled = noise.value / n
    p1 = a + v
    if centre is not None and centre_weight != 0.0:
        c0 = centre_weight * np.asarray(centre, dtype=np.float64)
        p2 = p1 - c0
        e_centre = UNIT_ROUNDOFF * norm_up(c0) + UNIT_ROUNDOFF * norm_up(p2)
    else:
        p2, e_centre = p1, 0.0
    grad = p2 + b_scaled
    error = float(
        e_t / n
        + UNIT_ROUNDOFF * norm_up(a)
        + UNIT_ROUNDOFF * norm_up(v)
        + gamma(2) * mu * norm_up(w)
        + e_centre
        + UNIT_ROUNDOFF * norm_up(b_scaled)
        + noise.radius / n * (1.0 + 2.0 * UNIT_ROUNDOFF)
        + UNIT_ROUNDOFF * (norm_up(p1) + norm_up(grad))
    )
    return float(norm_up(grad) + error * KAPPA)


# ---- the public plan ------------------------------------------------------------------------


def norm_exponential_quantile(d: int, beta: float) -> float:
    """A public bound on ‖b‖ for b ∝ exp(−β‖b‖) (‖b‖ ~ Gamma(d, 1/β)): (d + 10√d + 10)/β,
    exceeded with probability below e⁻¹⁰ (used only to scale τ; see :func:`tolerance`)."""
    return (d + 10.0 * math.sqrt(d) + 10.0) / beta


def gaussian_quantile(d: int, sigma: float) -> float:
    """A public bound on ‖b‖ for b ~ N(0, σ²I_d): σ(√d + 10) (exceeded w.p. < e⁻⁵⁰)."""
    return sigma * (math.sqrt(d) + 10.0)


def tolerance(*, n: int, d: int, c: float, strong_convexity: float, linear_bound: float) -> float:
    """τ, the public bound the certificate must meet, from public quantities only:

        τ = (1 + L)·(10⁻¹⁰ + 8(min(n, B) + d)u + 4c·γ_d/μ),

    L a public bound on ‖b/n − ηw₀‖ (a quantile of the noise norm over n, plus η‖w₀‖). Every
    rounding term of :func:`gradient_bound` is at most (B + d)u·(1 + ‖g‖)-ish (the gradient's
    terms are bounded by 1 + ‖g‖ at the optimum, μ‖w‖ ≤ 1 + ‖g‖) plus c·γ_d‖w‖ ≤
    cγ_d(1 + ‖g‖)/μ from the margins; the 10⁻¹⁰ is the solver's usual relative tolerance. The
    certificate then holds with room unless ‖g‖ ≫ L."""
    scale = 1.0 + linear_bound
    rows = min(n, BLOCK_ROWS)
    return scale * (
        _BASE + 8.0 * (rows + d) * UNIT_ROUNDOFF + 4.0 * c * gamma(d) / strong_convexity
    )


def release_share(n: int, tau: float) -> float:
    """κ = √(nτ)/(1 + √(nτ)), at most ½: the share of ε that pays for the release noise
    (module docstring: the split with the smallest expected coefficient shift)."""
    root = math.sqrt(n * tau)
    return min(_MAX_SHARE, root / (1.0 + root))


def split_epsilon(epsilon: float, share: float) -> tuple[float, float]:
    """(ε₁, ε_r) with ε_r = fl(κε) and ε₁ + ε_r ≤ ε in exact arithmetic."""
    release = epsilon * share
    return remainder_within(epsilon, release), release


@plan_kind("certified_release")
@dataclass(frozen=True, slots=True)
class CertifiedRelease(Plan):
    """The public numbers of one certified release (module docstring), a typed plan
    (:mod:`service.dp.core.plan`) nested in the plans of the mechanisms that use it. Built by
    :func:`plan`; :meth:`details` is its record (``certified_release``)."""

    n: int
    d: int
    c: float
    strong_convexity: float  # λ + Δ + η as computed (the real value is within 4u of it)
    linear_bound: float  # L, the public bound on ‖b/n − ηw₀‖ that scales τ
    epsilon: float  # ε_r
    tolerance: float  # τ
    distance: float  # r ≥ τ/μ for the real μ
    beta: float  # β_r ≤ ε_r/(2r)

    @property
    def expected_noise_norm(self) -> float:
        """E‖Z‖ = d/β_r."""
        return self.d / self.beta

    def with_linear_bound(self, linear_bound: float) -> CertifiedRelease:
        """The same release for a larger public L (e.g. a transfer centre's η‖w₀‖ added)."""
        return plan(
            n=self.n,
            d=self.d,
            c=self.c,
            strong_convexity=self.strong_convexity,
            linear_bound=linear_bound,
            epsilon=self.epsilon,
        )

    def details(self) -> dict[str, Any]:
        return {
            "certified_release": {
                "n": self.n,
                "d": self.d,
                "c": self.c,
                "strong_convexity": self.strong_convexity,
                "linear_bound": self.linear_bound,
                "epsilon": self.epsilon,
                "certificate_tolerance": self.tolerance,
                "distance_to_exact_minimiser_bound": self.distance,
                "sensitivity": 2.0 * self.distance,
                "beta": self.beta,
                "expected_noise_norm": self.expected_noise_norm,
                "release": lattice.RELEASE_NOTE,
            }
        }

    def describe(self) -> str:
        return (
            f"the minimiser is certified within r = τ/μ = {self.distance:.3g} of the exact one "
            f"(‖∇J̃‖ ≤ τ = {self.tolerance:.3g}, proved in IEEE arithmetic) and released with "
            f"noise ∝ exp(−β_r‖z‖), β_r = ε_r/(2r), ε_r = {self.epsilon:.6g}, on the 2^-32 grid"
        )


def plan(
    *,
    n: int,
    d: int,
    c: float,
    strong_convexity: float,
    linear_bound: float,
    epsilon: float,
) -> CertifiedRelease:
    """The certified release's public numbers for ε_r = ``epsilon``."""
    mu = strong_convexity * (1.0 - 4.0 * UNIT_ROUNDOFF)  # below the real λ + Δ + η
    tau = tolerance(n=n, d=d, c=c, strong_convexity=mu, linear_bound=linear_bound)
    distance = tau / mu * (1.0 + 2.0 * UNIT_ROUNDOFF)
    beta = epsilon / (2.0 * distance) * (1.0 - 4.0 * UNIT_ROUNDOFF)  # β_r·2r ≤ ε_r
    return CertifiedRelease(
        n=n,
        d=d,
        c=c,
        strong_convexity=strong_convexity,
        linear_bound=linear_bound,
        epsilon=epsilon,
        tolerance=tau,
        distance=distance,
        beta=beta,
    )


def split(
    epsilon: float,
    *,
    n: int,
    d: int,
    c: float,
    public: Callable[[float], tuple[float, float]],
) -> tuple[float, CertifiedRelease]:
    """(ε₁, release) for a mechanism whose objective at budget ε₁ has the public strong
    convexity and linear bound ``public(ε₁)``: κ = :func:`release_share` of n and the base
    tolerance τ₀ = 10⁻¹⁰ + 8(min(n, B) + d)u (the part of τ that does not depend on the noise), then
    the plan at ε₁ = ε − ε_r (:func:`split_epsilon`)."""
    objective, release = split_epsilon(epsilon, release_share(n, base_tolerance(n, d)))
    mu, bound = public(objective)
    return objective, plan(n=n, d=d, c=c, strong_convexity=mu, linear_bound=bound, epsilon=release)


def base_tolerance(n: int, d: int) -> float:
    """τ₀ = 10⁻¹⁰ + 8(min(n, B) + d)u: τ for L = 0 without the margins' term (chooses the
    split)."""
    return tolerance(n=n, d=d, c=0.0, strong_convexity=1.0, linear_bound=0.0)


def certified_solve(
    X: FloatArray,
    y: FloatArray,
    loss: Loss,
    *,
    regularization: float,
    extra_regularization: float,
    noise: lattice.Enclosure,
    threshold: float,
    tol: float,
    failure: str,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
    initial: FloatArray | None = None,
) -> FloatArray:
    """A minimiser of J̃_b̂ (from ``initial`` if given: a warm start changes the path, never the
    test) whose *proved* gradient bound for the real b is ≤ ``threshold``: the solver asked
    for its own ``tol``, then once for tol/64; :class:`ConvergenceError` with ``failure``
    (nothing released) when neither meets it. The bound comes from the solver's last pass
    (:func:`gradient_bound_from_pass`, O(n)) or, after a line search, from two passes of its
    own (:func:`gradient_bound`), which is also tried whenever the first does not meet the
    threshold (so a failure is decided by the full bound)."""
    for attempt in range(2):
        result = solve_erm(
            X,
            y,
            loss,
            regularization=regularization,
            linear=noise.value,
            extra_regularization=extra_regularization,
            centre=centre,
            centre_weight=centre_weight,
            tol=tol / 64.0**attempt,
            initial=initial,
        )
        terms: dict[str, Any] = {
            "regularization": regularization,
            "extra_regularization": extra_regularization,
            "noise": noise,
            "centre": centre,
            "centre_weight": centre_weight,
        }
        bound = math.inf
        if result.final_pass is not None:
            bound = gradient_bound_from_pass(
                result.final_pass, loss, result.coef, n=X.shape[0], **terms
            )
        if bound > threshold:  # no pass, or its bound too loose: two passes of our own
            bound = gradient_bound(X, y, loss, result.coef, **terms)
        if bound <= threshold:
            return result.coef
        initial = result.coef
    raise ConvergenceError(failure)


def first_certified(
    attempt: Callable[[float, FloatArray | None], FloatArray],
    bound: Callable[[FloatArray], float],
    *,
    threshold: float,
    tol: float,
    failure: str,
) -> FloatArray:
    """The first of the solver's answers ``attempt(tol, None)`` and, warm-started from it,
    ``attempt(tol/64, first)`` whose proved ``bound`` is ≤ ``threshold``;
    :class:`ConvergenceError` with ``failure`` (nothing released) when neither meets it."""
    initial: FloatArray | None = None
    for k in range(2):
        coef = attempt(tol / 64.0**k, initial)
        if bound(coef) <= threshold:
            return coef
        initial = coef
    raise ConvergenceError(failure)


#: A certified solve with its data bound (``certified_solve`` and its regression and
#: multinomial counterparts, partially applied to X, y and the model's own arguments).
CertifiedSolve = Callable[..., FloatArray]


def noise_free(
    solve: CertifiedSolve,
    dim: int,
    *,
    regularization: float,
    tolerance: float,
    failure: str = SENSITIVITY_FAILURE,
) -> FloatArray:
    """``solve`` for the noise-free objective (b = 0 as an exact enclosure, e_b = 0; Δ = 0)
    to a *proved* ‖∇J(ŵ)‖ ≤ τ = ``tolerance``, the solver asked for τ/4: by λ-strong
    convexity ‖ŵ − w*‖ ≤ τ/λ for the exact minimiser w*."""
    return solve(
        regularization=regularization,
        extra_regularization=0.0,
        noise=lattice.Enclosure(value=np.zeros(dim), radius=0.0),
        threshold=tolerance,
        tol=tolerance * _SOLVER_SHARE,
        failure=failure,
    )


def perturbed(
    solve: CertifiedSolve,
    *,
    regularization: float,
    extra_regularization: float,
    noise: lattice.Enclosure,
    release: CertifiedRelease,
    scale: float,
) -> FloatArray:
    """Step 3 of the module docstring: ``solve`` for J̃_b to the release's proved
    ‖∇J̃_b(ŵ)‖ ≤ τ, the solver asked for τ/(4·scale) (scale = 1 + ‖g‖, g the objective's
    linear term); :class:`ConvergenceError` (nothing released) when it cannot be met."""
    return solve(
        regularization=regularization,
        extra_regularization=extra_regularization,
        noise=noise,
        threshold=release.tolerance,
        tol=release.tolerance * _SOLVER_SHARE / scale,
        failure=RELEASE_FAILURE,
    )


def certified_erm(
    X: FloatArray,
    y: FloatArray,
    loss: Loss,
    *,
    regularization: float,
    tolerance: float,
    failure: str,
) -> FloatArray:
    """A double ŵ with a *proved* ‖∇J(ŵ)‖ ≤ τ = ``tolerance`` for the noise-free objective
    J(w) = (1/n)Σ l(y_i x_iᵀw) + (λ/2)‖w‖² in real arithmetic (λ the double given, so μ = λ
    exactly): :func:`certified_solve` with b = 0 (an exact enclosure, e_b = 0) and the solver
    asked for τ/4. By λ-strong convexity ‖ŵ − w*‖ ≤ τ/λ for the exact minimiser w*; output
    perturbation and the noisy average charge 2τ/λ for it. :class:`ConvergenceError` with
    ``failure`` (nothing released) when the bound is not met."""
    return noise_free(
        partial(certified_solve, X, y, loss),
        int(np.shape(X)[1]),
        regularization=regularization,
        tolerance=tolerance,
        failure=failure,
    )


def release_minimiser(
    X: FloatArray,
    y: FloatArray,
    loss: Loss,
    *,
    regularization: float,
    extra_regularization: float,
    noise: lattice.Enclosure,
    release: CertifiedRelease,
    rng: np.random.Generator | None,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
    initial: FloatArray | None = None,
) -> FloatArray:
    """Steps 3–4 of the module docstring: :func:`certified_solve` to ‖∇J̃_b(ŵ)‖ ≤ τ, then the
    exact release γ·round((ŵ + Z)/γ). Raises :class:`ConvergenceError` (nothing released)
    when the certificate cannot be met."""
    g = noise.value / X.shape[0]
    if centre is not None and centre_weight != 0.0:
        g = g - centre_weight * np.asarray(centre, dtype=np.float64)
    scale = 1.0 + float(np.linalg.norm(g))
    coef = perturbed(
        partial(
            certified_solve, X, y, loss, centre=centre, centre_weight=centre_weight, initial=initial
        ),
        regularization=regularization,
        extra_regularization=extra_regularization,
        noise=noise,
        release=release,
        scale=scale,
    )
    return lattice.norm_exponential_release(coef, beta=release.beta, rng=rng)
