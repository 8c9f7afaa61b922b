"""Rounds of Gaussian gradient-sum releases, shared by PSGD and the DP distributed Lasso.

In both protocols a site answers each round's public query point v_t with the exact grid
release γ·round((S(v_t) + Z)/γ), Z ~ N(0, σ_k² I_d), γ = 2⁻³² (:class:`lattice.GaussianBlock`:
the cell of the real-valued sum is sampled exactly), where S is a sum over the site's rows of
per-example gradients clipped to norm below C (:mod:`service.dp.data.clipping`). The argument:

* Sensitivity. Replacing one record changes the exact clipped sum by at most 2C, and the sum
  as computed in doubles by at most Δ_k = 2C + 2E(n_k) (:func:`clipping.sum_sensitivity`),
  *for every query point v*: the bound does not depend on v.
* One round. With σ_k ≥ σ·Δ_k/(2C) the release is a Gaussian mechanism, ρ₁-zCDP with
  ρ₁ = Δ_k²/(2σ_k²) ≤ (2C)²/(2σ²) (Bun & Steinke 2016, Prop. 1.6); the grid rounding is
  post-processing of S + Z (for every set O of grid points, P_D[O] = P[S(D) + Z ∈ C(O)], C(O)
  a data-independent union of cells).
* T rounds. The query points may be chosen by the coordinator from everything it has seen,
  honestly or not: adaptive composition of zCDP (Bun & Steinke 2016, Lemma 2.3) gives ρ = Tρ₁
  for the site's whole transcript, whatever the points. ρ-zCDP ⇒ (ε(ρ, δ), δ)-DP with the
  conversion ``zcdp_conversion`` (``"cks"``: Canonne, Kamath & Steinke 2020; ``"bun_steinke"``:
  ε = ρ + 2√(ρ ln(1/δ))).

The margin Δ_k/(2C) − 1 ≈ n_k²u depends on the site's row count, which no other party may
learn (docs/design.md §2), so it does not enter the public σ: each site scales its own noise to
σ_k = σ·Δ_k/(2C) (:func:`site_noise`), which keeps every site's per-round cost at exactly the
ρ₁ shown.

Very noisy answers (a tiny ε per round) are released on the coarser grid sγ, s = 2^k ≥ 1 the
smallest power of two with σ_k/s ≤ 16 (:func:`grid_scale`, a function of σ_k only): the exact
sampler decides each coordinate's cell from a floating-point evaluation whose error grows with
the noise in cells, and beyond 2⁵⁰ cells it falls back to decimal arithmetic. The release
s·γ·round((S/s + Z/s)/γ), Z/s ~ N(0, (σ_k/s)²I), is the cell of S + Z on the grid sγ
(post-processing); S/s is exact unless it is subnormal, which moves each coordinate by at most
s·2⁻¹⁰⁷⁵, so Δ_k gains 2s⌈√d⌉2⁻¹⁰⁷⁵ (:func:`site_noise`; nothing when s = 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

import numpy as np

from service.dp.core.accounting import (
    PrivacyCost,
    gaussian_zcdp,
    zcdp_compose,
    zcdp_to_dp,
    zcdp_to_dp_cks,
)
from service.dp.core.plan import Plan, plan_kind
from service.dp.data import clipping
from service.dp.federated._common import FloatArray, finite
from service.dp.noise import lattice

__all__ = [
    "CONVERSIONS",
    "FLOAT_MARGIN_NOTE",
    "GRADIENT_RELEASE",
    "NOISE_BLOCK",
    "PUBLIC_DETAILS",
    "GaussianRounds",
    "GaussianSitePlan",
    "NoiseStream",
    "RoundsPlan",
    "calibrate_rounds",
    "grid_scale",
    "max_rho",
    "site_noise",
    "site_plan",
]

CONVERSIONS: Final[tuple[str, ...]] = ("cks", "bun_steinke")

#: How the floating-point margin enters (the ``float_margin_note`` detail; no site's size).
FLOAT_MARGIN_NOTE: Final[str] = (
    "each site's clipped gradient sum is computed in doubles: its sensitivity as computed is "
    "2C + 2E(n_k) ≤ 2C(1 + n_k²·2^-53·(1 + …)), E the worst-case rounding of a sum of n_k rows "
    "(service.dp.data.clipping); site k adds N(0, σ_k²I) with σ_k = σ·(1 + that margin), so each "
    "round costs every site exactly the ρ shown. σ_k is not shown: it depends on n_k"
)

#: What a calibration records about the sites' answers (the ``release`` detail).
GRADIENT_RELEASE: Final[str] = (
    "each site's noisy gradient sum is an exact grid release γ·round((S + Z)/γ), γ = 2^-32, "
    "Z ~ N(0, σ²I) (service.dp.noise.lattice), with σ calibrated to the sensitivity of the sum as "
    "computed in floating point (service.dp.data.clipping); the coordinator's steps are "
    "post-processing, so the guarantee holds for the released doubles"
)

#: The calibration details of Gaussian rounds that depend on no site's size (functions of ε, δ,
#: T, C and d only): what a federated record may show every member. σ_k and the margins, under
#: ``details["sites"]``, depend on n_k and are not among them.
PUBLIC_DETAILS: Final[frozenset[str]] = frozenset(
    {
        "zcdp_conversion",
        "clip",
        "sensitivity",
        "rho_per_round",
        "rho_total",
        "sigma",
        "epsilon_spent",
        "epsilon_bun_steinke",
        "expected_noise_norm_per_site",
        "float_margin_note",
        "release",
    }
)

#: A site draws the noise of this many rounds at once (:class:`lattice.GaussianBlock`).
NOISE_BLOCK: Final[int] = 32


def max_rho(epsilon: float, delta: float, conversion: str) -> float:
    """The largest total ρ whose (ε, δ) conversion is ≤ ε."""
    log_inv = math.log(1.0 / delta)
    closed = (math.sqrt(log_inv + epsilon) - math.sqrt(log_inv)) ** 2
    if conversion == "bun_steinke":
        rho = closed
        while rho > 0.0 and zcdp_to_dp(rho, delta).epsilon > epsilon:
            rho = math.nextafter(rho, 0.0)
        return rho

    def excess(r: float) -> float:
        return zcdp_to_dp_cks(r, delta).epsilon - epsilon

    hi = max(closed, epsilon)
    while excess(hi) < 0.0:
        hi *= 2.0
    from scipy import optimize  # here, not at the top: processes that never solve skip it

    rho = float(optimize.brentq(excess, closed, hi, xtol=1e-14, rtol=1e-12))
    step = 1e-12  # doubled at every try: a few tries even where the conversion is coarse
    while rho > closed and excess(rho) > 0.0:
        rho *= 1.0 - step
        step = min(2.0 * step, 1e-3)
    return max(rho, closed)


@dataclass(frozen=True, slots=True)
class GaussianRounds:
    """σ for T Gaussian rounds of sensitivity 2C within (ε, δ), and what they achieve."""

    sigma: float
    sensitivity: float
    rho_per_round: float
    rho_total: float
    achieved: PrivacyCost
    epsilon_bun_steinke: float

    def details(self) -> dict[str, Any]:
        return {
            "sensitivity": self.sensitivity,
            "rho_per_round": self.rho_per_round,
            "rho_total": self.rho_total,
            "sigma": self.sigma,
            "epsilon_spent": float(self.achieved.epsilon),
            "epsilon_bun_steinke": self.epsilon_bun_steinke,
        }

    def plan(self, conversion: str) -> RoundsPlan:
        """The typed plan of these rounds (what a protocol's plan carries to its run)."""
        return RoundsPlan(
            zcdp_conversion=conversion,
            sensitivity=self.sensitivity,
            rho_per_round=self.rho_per_round,
            rho_total=self.rho_total,
            sigma=self.sigma,
            epsilon_spent=float(self.achieved.epsilon),
            epsilon_bun_steinke=self.epsilon_bun_steinke,
        )


@plan_kind("federated.gaussian_rounds")
@dataclass(frozen=True, slots=True)
class RoundsPlan(Plan):
    """T Gaussian rounds as calibrated (:func:`calibrate_rounds`): σ for sensitivity 2C, the
    per-round and total ρ, and the ε they convert to. No site's size enters it."""

    zcdp_conversion: str
    sensitivity: float
    rho_per_round: float
    rho_total: float
    sigma: float
    epsilon_spent: float
    epsilon_bun_steinke: float

    def record(self) -> dict[str, float]:
        """The calibration details of these rounds (finite floats, the record's names)."""
        return {
            "sensitivity": finite(self.sensitivity),
            "rho_per_round": finite(self.rho_per_round),
            "rho_total": finite(self.rho_total),
            "sigma": finite(self.sigma),
            "epsilon_spent": finite(self.epsilon_spent),
            "epsilon_bun_steinke": finite(self.epsilon_bun_steinke),
        }


@plan_kind("federated.gaussian_site")
@dataclass(frozen=True, slots=True)
class GaussianSitePlan(Plan):
    """One site's answers (:func:`site_plan`): its size n_k, the sensitivity Δ_k of its sum as
    computed (rounded up), the floating-point margin Δ_k/(2C) − 1, its own σ_k and the grid
    scale s = :func:`grid_scale` (σ_k) its releases lie on (not in the record: a function of
    σ_k, which :class:`NoiseStream` recomputes)."""

    n: int
    sensitivity: float
    float_margin: float
    sigma: float
    grid_scale: int = 1

    def record(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "sensitivity": self.sensitivity,
            "float_margin": self.float_margin,
            "sigma": self.sigma,
        }


def calibrate_rounds(
    epsilon: float, delta: float, *, rounds: int, clip: float, conversion: str
) -> GaussianRounds:
    """A σ with T rounds of ρ₁ = (2C)²/(2σ²) within (ε, δ) after the conversion:
    σ = 2C/√(2ρ/T) for ρ = :func:`max_rho`, raised by relative steps of 10⁻¹², 2·10⁻¹², … until
    the achieved ε is ≤ ε when computed back (usually at once; the doubling keeps the search
    short where the numerical conversion is coarse, at tiny ρ)."""
    sensitivity = 2.0 * clip
    sigma = sensitivity / math.sqrt(2.0 * max_rho(epsilon, delta, conversion) / rounds)
    convert = zcdp_to_dp_cks if conversion == "cks" else zcdp_to_dp
    step = 1e-12
    while True:
        rho_round = gaussian_zcdp(sensitivity, sigma)
        rho_total = zcdp_compose([rho_round] * rounds)
        achieved = convert(rho_total, delta)
        if achieved.epsilon <= epsilon:
            break
        sigma *= 1.0 + step
        step = min(2.0 * step, 1e-3)
    return GaussianRounds(
        sigma=sigma,
        sensitivity=sensitivity,
        rho_per_round=rho_round,
        rho_total=rho_total,
        achieved=achieved,
        epsilon_bun_steinke=zcdp_to_dp(rho_total, delta).epsilon,
    )


#: Noise standard deviation, in units of the grid's scale s, that the grid is chosen for.
_SIGMA_PER_SCALE: Final[float] = 16.0
_MAX_SCALE_EXPONENT: Final[int] = 200


def grid_scale(sigma: float) -> int:
    """s = 2^k ≥ 1, the smallest power of two with σ/s ≤ 16 (module docstring)."""
    if not math.isfinite(sigma) or sigma <= _SIGMA_PER_SCALE:
        return 1
    return 1 << min(_MAX_SCALE_EXPONENT, math.ceil(math.log2(sigma / _SIGMA_PER_SCALE)))


def site_noise(n: int, d: int, clip: float, sigma: float) -> dict[str, Any]:
    """:func:`site_plan`'s record (the per-site entry of a calibration's ``details``)."""
    return site_plan(n, d, clip, sigma).record()


def site_plan(n: int, d: int, clip: float, sigma: float) -> GaussianSitePlan:
    """Site of n rows: Δ_k = 2C + 2E(n) (+ 2s⌈√d⌉2⁻¹⁰⁷⁵ on a scaled grid; the sensitivity of
    its sum as released, rounded up) and σ_k, the smallest double ≥ σ·Δ_k/(2C) (so
    Δ_k/σ_k ≤ 2C/σ exactly): its rounds are ρ₁-zCDP with ρ₁ = (2C)²/(2σ²), the calibrated
    per-round cost. s = :func:`grid_scale` (σ_k), found as a fixed point (σ_k grows with s)."""
    base = clipping.sum_sensitivity(n, d, clip)
    scale = 1
    while True:
        exact = base + (
            2 * scale * clipping.ceil_sqrt(d) * Fraction(1, 2**1075) if scale > 1 else 0
        )
        own = clipping.round_up(Fraction(sigma) * exact / (2 * Fraction(clip)))
        if grid_scale(own) <= scale:
            break
        scale = grid_scale(own)
    return GaussianSitePlan(
        n=n,
        sensitivity=clipping.round_up(exact),
        float_margin=float(exact / (2 * Fraction(clip)) - 1),
        sigma=own,
        grid_scale=grid_scale(own),
    )


class NoiseStream:
    """A site's Gaussian noise for its rounds: the noise of the next :data:`NOISE_BLOCK`
    rounds is drawn (from the first call's ``rng``) and evaluated at once; each noise vector
    is used for one release only. Releases are on the grid sγ, s = :func:`grid_scale` (σ)."""

    def __init__(self, d: int) -> None:
        self._d = d
        self._block: lattice.GaussianBlock | None = None
        self._used = 0

    def release(
        self, value: FloatArray, sigma: float, rng: np.random.Generator | None
    ) -> FloatArray:
        """The exact point of the grid sγ for value + N(0, σ²I) (s a power of two: value/s
        and s·(·) are exact unless value/s is subnormal, covered by :func:`site_noise`)."""
        scale = grid_scale(sigma)
        block = self._block
        if block is None or block.sigma != sigma / scale or self._used == block.count:
            block = lattice.GaussianBlock(NOISE_BLOCK, self._d, sigma=sigma / scale, rng=rng)
            self._block, self._used = block, 0
        self._used += 1
        if scale == 1:
            return block.release(self._used - 1, value)
        out: FloatArray = scale * block.release(self._used - 1, value / scale)
        return out
