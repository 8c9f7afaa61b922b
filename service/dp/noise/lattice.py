"""Exact lattice release of a noisy vector: ``γ·round((w + X)/γ)`` with X drawn exactly.

Why (issue 19 §1, Mironov 2012). A continuous sampler evaluated in floating point —
``θ·gammaincinv(d, U)·direction`` with a 52-bit U — reaches only a sparse, irregular set of
doubles; in the tails consecutive reachable norms are further apart than the 2⁻³² release grid,
so an observer who knows two neighbouring centres w, w′ finds released vectors that one can
produce and the other cannot: the release is only (ε, δ)-DP with δ > 0.

What is released. For a centre w ∈ ℝ^d (a vector of doubles), a noise law with density p on
ℝ^d and the public grid γ = 2⁻³² (:data:`GRID`):

    o = γ · clamp(round((w + X)/γ), ±2⁵²),   X ~ p,

computed *exactly*: the integer vector round((w + X)/γ) is a deterministic function of the
uniform reals U₁, U₂, … that define X, and the sampler draws those uniforms lazily, bit by bit,
evaluating the function with rigorous interval arithmetic (below) until every coordinate's
interval lies inside a single rounding cell [k − ½, k + ½). The returned integers therefore
have exactly the law of round((w + X)/γ) for the *real-valued* X ~ p; no floating-point
rounding enters before the final, exact, multiplication by γ (|k| ≤ 2⁵², γ a power of two).
Cell boundaries have probability zero, so the refinement ends with probability one (in practice
at once: 64 bits per uniform leave an interval ~2⁻²⁰ of a cell wide).

Privacy (exact, for the doubles released). w + X is the continuous mechanism whose privacy the
calling mechanism proves (p(x − w)/p(x − w′) ≤ e^ε pointwise for the norm-exponential law with
β = ε/S and ‖w − w′‖ ≤ S; the Gaussian and Laplace analogues likewise). Rounding to the grid
and clamping to the public bound are post-processing: for every set O of outputs,
P_w[o ∈ O] = P[w + X ∈ C(O)] with C(O) the (w-independent) union of cells, so every guarantee
of w + X carries over unchanged — no ε adjustment, no rounding of w, no extra sensitivity.
Every grid point has positive probability under every centre (p > 0 everywhere), so no output
is possible under one dataset and impossible under its neighbour.

Laws, as functions of exact uniforms U ∈ (0, 1):

* standard Gaussian pairs by Marsaglia's polar method: (u, v) = (2U₁ − 1, 2U₂ − 1) accepted
  when 0 < s = u² + v² < 1 (decided exactly on the bit intervals, refining while undecided),
  then (u, v)·√(−2 ln s / s) are independent N(0, 1);
* norm-exponential ν(x) ∝ exp(−β‖x‖): direction g/‖g‖ with g a standard Gaussian vector
  (uniform on the sphere), norm R = −ln(U₁⋯U_d)/β = Σ(−ln U_i)/β ~ Gamma(d, 1/β);
* Laplace(b): b·(±1)·(−ln U) with a fair sign;  Gaussian N(0, σ²): σ·g.

Interval arithmetic: :mod:`decimal` with directed rounding (ROUND_FLOOR for lower ends,
ROUND_CEILING for upper ends) for +, −, ×, ÷; ``ln`` and ``sqrt`` are correctly rounded by the
decimal module (≤ ½ ulp), and each result is widened by one ulp on each side
(``next_minus``/``next_plus``), so every interval provably contains the real value.

(``ln``'s lower end uses ln(lo) ≥ ln(hi) − (hi − lo)/lo, one logarithm per interval.)

Randomness: 32-bit words from ``os.urandom`` (``rng=None``) or ``rng.integers`` (test mode).

Fast path (issue 19 §1: DP-SGD releases one vector per update). The decimal evaluation of a
whole 100-dimensional vector costs ≈ 7 ms. The same function of the same uniforms is first
evaluated in numpy doubles with a *rigorous* error bound E per coordinate; a coordinate whose
enclosure [v − E, v + E] lies inside one rounding cell is decided there, and only the others
(a coordinate within E of a cell boundary, probability ≈ 2E) go to the decimal path, which
continues from the very same uniforms (refining them if needed). The returned cells are
therefore the cells of the real-valued function of the uniforms — exactly as without the fast
path; only the time changes. The bound uses only IEEE-754 double operations that are
correctly rounded (+, −, ×, ÷, √, round-to-nearest-even; no fused multiply–add across numpy
calls, no extended precision), unit roundoff u = 2⁻⁵³, relative error |δ| ≤ u per operation
(no underflow or overflow arises: the fast path is used only for noise scales in
[2⁻⁵⁰⁰, 2⁵⁰⁰] grid units, and every other quantity is at least 2⁻¹²⁰ in magnitude — |û| ≥ 2⁻⁶⁴,
s and |ln s| ≥ 2⁻⁴⁸, t² ≥ 2⁻¹⁰⁸ — or exactly zero). numpy's
``log`` is *not* used (it is not guaranteed correctly rounded); :func:`_ln` evaluates

    ln x = e·ln 2 + 2·atanh(t),   x = m·2^e (frexp, exact), m ∈ [0.7071…, 1.4142…),
    t = (m − 1)/(m + 1),  2·atanh(t) = 2t·Σ_{k=0}^{10} t^{2k}/(2k + 1) + remainder,

with m − 1 exact (Sterbenz), |t| ≤ 0.17158, w = t² ≤ 0.0295: t̂ carries relative error
≤ 2.0001u, ŵ ≤ 5.03u (which moves the sum by ≤ 0.052u), Horner's rule on the positive,
rapidly decreasing series (coefficients rounded, rel. ≤ u) ≤ 2.07u (each step's carried error
is damped by w/(1 − w) ≤ 0.0304), the omitted tail w¹¹/(23(1 − w)) ≤ 0.006u, the product
2t̂·P̂ one more u: |l̂_m − ln m| ≤ 5.4u·|ln m| ≤ 6u·|l̂_m|. With ln 2 split as
LN2_HI + LN2_LO (|LN2_HI + LN2_LO − ln 2| ≤ 2⁻⁸⁶, LN2_HI of 32 bits so e·LN2_HI is exact),
l̂ = e·LN2_HI + τ̂, τ̂ = fl(e·LN2_LO + l̂_m) (two roundings: ≤ u|e|LN2_LO + u|τ̂|) and the final
addition (≤ u·|l̂|):

    |l̂ − ln x| ≤ 6u·|l̂_m| + u·|τ̂| + u·|l̂| + 2⁻⁸⁰·|e|                       (L)

(``tests/unit/dp/test_lattice_fast.py`` checks (L) against 60-digit decimal logarithms).

The uniforms: a uniform known to its first 64 bits k (two 32-bit words a, b) lies in
[k, k + 1]·2⁻⁶⁴. For the polar method the centre of u's interval is a·2⁻³¹ − 1 + (b + ½)·2⁻⁶³
(both terms exact) = û + û_lo exactly (TwoSum), so |u − û| ≤ h + |û_lo| ≤ h + u·|û|,
h = 2⁻⁶⁴; for the radial uniforms x̂ = fl(k)·2⁻⁶⁴ gives |ln U − ln x̂| ≤ 1/k + 1.01u. (With
32-bit first draws, h = 2⁻³², û_lo = 0 and x̂ is exact.) Then, with
every relative bound ρ below required to be ≤ 2⁻²⁰ (otherwise the coordinate or vector goes to
the decimal path) and every first-order bound multiplied by κ = 1 + 2⁻¹⁶ when evaluated —
which covers both the neglected second-order terms (≤ 3ρ ≤ 2⁻¹⁸ relative) and the ≤ 10
roundings of evaluating the bound itself:

* polar pair: s at the centres, (û + û_lo)² + (v̂ + v̂_lo)², is computed as ŝ + ŝ_lo with
  Dekker's exact squares and TwoSum, the small cross terms rounded: error ≤ 13u²·ŝ ≤ 2⁻¹⁰⁰ŝ;
  the real s is within 2h(|u| + |v|) + 2h² of the centre value, so
  |s − (ŝ + ŝ_lo)| ≤ e_s = 4h + 2h² + 2⁻¹⁰⁰ŝ and |s − ŝ| ≤ |ŝ_lo| + e_s, ρ_s = that/(ŝ − that);
  L = ln s = ln ŝ + δ − O(δ²), δ = ŝ_lo/ŝ (|δ| ≤ 4.2u): l̂ = fl((L)-evaluated ln ŝ + fl(δ)),
  e_L = (L)(ŝ) + u|l̂| + 22u² + e_s/(ŝ − |ŝ_lo| − e_s), ρ_L = e_L/(|l̂| − e_L) (≈ 7u even for s
  near 1, where ln s is small); q = −2L/s: ρ_q = ρ_L + ρ_s + u; f = √q: ρ_f = ρ_q/2 + u;
  g = u·f: |ĝ − g| ≤ e_g = f̂·(|û|(ρ_f + 2u) + h)/(1 − ρ_f).
  (The acceptance s < 1 is decided exactly: by |fl(û² + v̂²) − s| ≤ 5u + 4h + 2⁻⁶² when that
  is 2⁻⁴⁸ + 4h away from 0 and 1, otherwise on the integer bit intervals as in the decimal
  path.)
* Gaussian release, S = σ/γ (exact): |ŷ − gS| ≤ S·e_g + u·|ŷ|.
* norm-exponential release: Ĝ = √(Σĝ²) and R̂ = Σ(−l̂_i) are summed with a correctly rounded
  (``math.fsum``, error ≤ 2u·|result| even if only faithful) or compensated (Ogita–Rump–Oishi
  Sum2, error ≤ u·|result| + γ²_{d−1}Σ|terms|) summation; ρ_G = 2u + ‖e_g‖/Ĝ,
  ρ_R = (Σe_i + sum error)/(R̂ − ·) with e_i = (L)(x̂_i) + 1/k_i + 1.01u; the scale
  A = R/(βγ·G) has ρ_A = ρ_R + ρ_G + 2u, and y_i = g_i·A:
  |ŷ_i − y_i| ≤ Â·(|ĝ_i|(ρ_A + u) + e_{g,i})/(1 − ρ_A).
* the cell of c/γ + y (c/γ exact; |c| ≤ 2¹⁹ else decimal path): with c/γ = c_i + c_f
  (c_i = rint, c_f exact, |c_f| ≤ ½), z = fl(c_f + ŷ) (error ≤ u|z|), k₀ = rint(z) and
  r = z − k₀ (exact, |r| ≤ ½, Sterbenz), the coordinate is decided as c_i + k₀ when
  fl(½ − |r|) > E_y + u(½ + |ŷ|)(1 + 2u) + 2⁻⁵² (the 2⁻⁵² covers the ≤ 2⁻⁵⁵ rounding of
  ½ − |r|), i.e. when the whole enclosure lies strictly inside one cell.

Decimal path for the undecided coordinates. A Gaussian coordinate needs only its pair. A
norm-exponential coordinate shares ‖g‖ and R with the whole vector, but both cost one
logarithm each: R = −ln(U₁⋯U_d) and, since a polar pair has g_u² + g_v² = −2 ln s,
‖g‖² = −2 ln(∏_p s_p) (+ g_last² for odd d), the products bounded by exact integers cut to
≈ 4× the working digits (floor below, ceiling above); so an undecided coordinate costs two
logarithms plus one per undecided pair (≈ 0.3 ms at d = 106), not a whole decimal vector.

Blocks. The noise does not depend on the centre, so :class:`NormExponentialBlock` and
:class:`GaussianBlock` draw and evaluate (vectorised) the noise of many releases at once;
``release(j, centre)`` then costs a dozen numpy operations on d numbers. Each noise vector is
used once (a second ``release(j, ·)`` raises). A block consumes the random words in a fixed
order (the polar pairs of all its vectors, then the radial uniforms), so seeded runs are
reproducible; the words a fallback refines with are drawn when it happens — the uniforms stay
i.i.d. and independent of everything else, so the law is unchanged.

Design note. Drawing Z ∈ ℤ^d with p(z) ∝ exp(−β′‖z‖) by rejection from a product discrete
Gaussian proposal does not work: a Gaussian's tail is lighter than exp(−β′r), so no constant
M gives exp(−β′r) ≤ M·exp(−r²/2σ²) for all r (AM–GM gives the reverse inequality; the
acceptance probability exp(−(r − β′σ²)²/2σ²) is the one for a Gaussian *target* from an
exponential proposal, CKS's discrete Gaussian). Sampling the rounding cell of the continuous
mechanism exactly, as here, needs no discrete law of its own, no rounding of the centre and
no inflated sensitivity (Δ + γ√d)/γ.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from typing import Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

from service.dp.noise.rounding import compensated_row_sums

__all__ = [
    "CLAMP",
    "ENCLOSURE_RELATIVE",
    "GRID",
    "GRID_EXPONENT",
    "RELEASE_NOTE",
    "Enclosure",
    "GaussianBlock",
    "NormExponentialBlock",
    "gaussian_enclosure",
    "gaussian_release",
    "laplace_release",
    "norm_exponential_enclosure",
    "norm_exponential_release",
]

FloatArray = NDArray[np.float64]

#: The release grid is γ = 2^-GRID_EXPONENT (docs/design.md §2: released weights on multiples
#: of 2⁻³²).
GRID_EXPONENT: Final[int] = 32
GRID: Final[float] = 2.0**-GRID_EXPONENT
#: Public clamp on the released integers: |k| ≤ 2⁵², so k·γ is an exact double (|o| ≤ 2²⁰).
CLAMP: Final[int] = 2**52

#: What a calibration records about the release (the ``release`` detail).
RELEASE_NOTE: Final[str] = (
    "exact grid release: γ·round((w + noise)/γ), γ = 2^-32, clamped to ±2^20, the noise's law "
    "sampled exactly (lazy uniform bits, rigorous interval arithmetic); post-processing of "
    "the continuous mechanism, so its guarantee holds for the released doubles"
)

_WORD = 32
_FIRST_WORDS = 2  # 64 bits per uniform at first
_HALF = Decimal("0.5")
_MINUS_TWO = Decimal(-2)
# Decimal's unary minus, abs() and mixed int arithmetic round to the *default* context; this
# module uses only copy_negate/copy_abs and the directed contexts of _Arith, and converts ints
# and doubles (which Decimal represents exactly) with the constructor.


class _Bits:
    """A source of uniform 32-bit words: the OS CSPRNG or a numpy Generator (test mode)."""

    def __init__(self, rng: np.random.Generator | None) -> None:
        self._rng = rng

    def array(self, count: int) -> NDArray[np.uint64]:
        """``count`` words as an array (each < 2³²)."""
        if self._rng is None:
            raw = np.frombuffer(os.urandom(4 * count), dtype=np.uint32)
            return raw.astype(np.uint64)
        return self._rng.integers(0, 2**_WORD, size=count, dtype=np.uint64)

    def words(self, count: int) -> list[int]:
        if count == 0:
            return []
        return [int(v) for v in self.array(count)]


class _Uniform:
    """A uniform real in (0, 1), known so far to ``bits`` bits: U ∈ [k/2^bits, (k+1)/2^bits]."""

    __slots__ = ("bits", "k")

    def __init__(self, k: int, bits: int) -> None:
        self.k = k
        self.bits = bits

    @classmethod
    def from_words(cls, words: NDArray[np.uint64]) -> _Uniform:
        k = 0
        for w in words:
            k = (k << _WORD) | int(w)
        return cls(k, _WORD * len(words))

    @classmethod
    def many(cls, words: NDArray[np.uint64]) -> list[_Uniform]:
        """One uniform per row of ``words`` (first word on top), built without a Python loop
        over the words when they fit 64 bits."""
        fw = words.shape[1]
        if fw > 2:
            return [cls.from_words(row) for row in words]
        top = words[:, 0] if fw == 1 else (words[:, 0] << np.uint64(_WORD)) | words[:, 1]
        return [cls(k, _WORD * fw) for k in top.tolist()]

    def refine(self, word: int) -> None:
        self.k = (self.k << _WORD) | word
        self.bits += _WORD


#: 2^bits as exact Decimals, by bits
_POWERS: dict[int, Decimal] = {}


class _Arith:
    """Directed-rounding decimal arithmetic at one precision; intervals are (lo, hi) pairs."""

    def __init__(self, digits: int) -> None:
        self.lo = Context(prec=digits, rounding=ROUND_FLOOR)
        self.hi = Context(prec=digits, rounding=ROUND_CEILING)
        self.near = Context(prec=digits)

    def uniform(self, u: _Uniform, *, signed: bool = False) -> tuple[Decimal, Decimal]:
        """[k, k + 1]/2^bits, or 2·that − 1 for a uniform on (−1, 1)."""
        power = 1 << u.bits
        scale = _POWERS.get(u.bits)
        if scale is None:
            scale = _POWERS.setdefault(u.bits, Decimal(power))  # int → Decimal: exact
        if signed:
            a, b = Decimal(2 * u.k - power), Decimal(2 * u.k + 2 - power)
        else:
            a, b = Decimal(u.k), Decimal(u.k + 1)
        return self.lo.divide(a, scale), self.hi.divide(b, scale)

    def add(
        self, x: tuple[Decimal, Decimal], y: tuple[Decimal, Decimal]
    ) -> tuple[Decimal, Decimal]:
        return self.lo.add(x[0], y[0]), self.hi.add(x[1], y[1])

    def mul_pos(
        self, x: tuple[Decimal, Decimal], y: tuple[Decimal, Decimal]
    ) -> tuple[Decimal, Decimal]:
        """x·y for an interval y with y.lo ≥ 0: each end of x meets the end of y that
        makes it extreme (lo·y.hi when lo < 0, else lo·y.lo; likewise for hi)."""
        lo = self.lo.multiply(x[0], y[1] if x[0] < 0 else y[0])
        hi = self.hi.multiply(x[1], y[0] if x[1] < 0 else y[1])
        return lo, hi

    def div_pos(
        self, x: tuple[Decimal, Decimal], y: tuple[Decimal, Decimal]
    ) -> tuple[Decimal, Decimal]:
        """x / y for an interval y with y.lo > 0 (the same end choice as :meth:`mul_pos`)."""
        lo = self.lo.divide(x[0], y[0] if x[0] < 0 else y[1])
        hi = self.hi.divide(x[1], y[1] if x[1] < 0 else y[0])
        return lo, hi

    def square(self, x: tuple[Decimal, Decimal]) -> tuple[Decimal, Decimal]:
        a, b = x[0].copy_abs(), x[1].copy_abs()
        small = Decimal(0) if x[0] <= 0 <= x[1] else min(a, b)
        return self.lo.multiply(small, small), self.hi.multiply(max(a, b), max(a, b))

    def ln(self, x: tuple[Decimal, Decimal]) -> tuple[Decimal, Decimal]:
        """ln on an interval with x.lo > 0. One correctly rounded ln(hi) widened by one ulp
        gives the upper end; the lower end uses ln(lo) ≥ ln(hi) − (hi − lo)/lo (concavity:
        ln(hi) − ln(lo) = ∫ dt/t ≤ (hi − lo)/lo), with the correction rounded up."""
        top = self.near.ln(x[1])
        gap = self.hi.divide(self.hi.subtract(x[1], x[0]), x[0])
        return self.lo.subtract(top.next_minus(self.near), gap), top.next_plus(self.near)

    def sqrt(self, x: tuple[Decimal, Decimal]) -> tuple[Decimal, Decimal]:
        """√ on an interval with x.lo ≥ 0."""
        low = self.near.sqrt(x[0]).next_minus(self.near) if x[0] > 0 else Decimal(0)
        return max(low, Decimal(0)), self.near.sqrt(x[1]).next_plus(self.near)


class _Undecided(Exception):
    """The current bits do not decide a value (an interval touches 0 or a cell boundary)."""


Interval = tuple[Decimal, Decimal]
Evaluator = Callable[[_Arith], tuple[list[Interval], Interval]]


class _Sampler:
    """Lazily refined uniforms and the exact cell of centre + noise."""

    def __init__(
        self,
        bits: _Bits,
        magnitude_digits: int = 0,
        uniforms: list[_Uniform] | None = None,
    ) -> None:
        self._digits = magnitude_digits
        self._bits = bits
        self._uniforms: list[_Uniform] = list(uniforms or [])
        self._max_bits = max([_WORD * _FIRST_WORDS] + [u.bits for u in self._uniforms])
        self._arith: _Arith | None = None
        self.wide = _Arith(digits=self._max_bits * 3 // 10 + 8 + magnitude_digits)
        self._arith_bits = 0

    def new_uniforms(self, count: int) -> list[_Uniform]:
        words = self._bits.words(_FIRST_WORDS * count)
        out = []
        for i in range(count):
            k = 0
            for w in words[_FIRST_WORDS * i : _FIRST_WORDS * (i + 1)]:
                k = (k << _WORD) | w
            out.append(_Uniform(k, _WORD * _FIRST_WORDS))
        self._uniforms.extend(out)
        return out

    def refine(self, uniforms: list[_Uniform]) -> None:
        for u, w in zip(uniforms, self._bits.words(len(uniforms)), strict=True):
            u.refine(w)
            self._max_bits = max(self._max_bits, u.bits)

    def refine_all(self) -> None:
        self.refine(self._uniforms)

    def arith(self) -> _Arith:
        bits = self._max_bits
        if self._arith is None or self._arith_bits != bits:
            # the arithmetic's rounding (relative 10^-digits) stays far below the uniforms'
            # own resolution 2^-bits; too few digits would only widen the intervals (more
            # refinement, which raises the precision), never make them wrong
            self._arith, self._arith_bits = _Arith(digits=bits * 3 // 10 + 8), bits
            # adding the centre needs its integer digits on top
            self.wide = _Arith(digits=bits * 3 // 10 + 8 + self._digits)
        return self._arith

    def cells(self, evaluate: Evaluator, grid_centre: list[Decimal]) -> list[int]:
        """The exact cells of grid_centre + noise, refining every uniform until decided."""
        while True:
            ar = self.arith()
            try:
                noise, scale = evaluate(ar)
                return _cells(ar, self.wide, grid_centre, noise, scale)
            except _Undecided:
                self.refine_all()


def _disc_decision(a: _Uniform, b: _Uniform) -> bool | None:
    """The polar method's test on the current bits: True (0 < s < 1), False (s ≥ 1, rejected)
    or None (undecided: refine)."""
    lo, hi, one = _disc_bounds(a, b)
    if lo > 0 and hi < one:
        return True
    if lo >= one:
        return False
    return None


def _disc_bounds(a: _Uniform, b: _Uniform) -> tuple[int, int, int]:
    """Exact bounds of s = u² + v² (u = 2U_a − 1, v = 2U_b − 1 on their bit intervals) as
    integers over the common scale 4^m: (lo, hi, 4^m) with lo/4^m ≤ s ≤ hi/4^m."""
    m = max(a.bits, b.bits)
    lo = hi = 0
    for u in (a, b):
        scale = 1 << u.bits
        ends = (2 * u.k - scale, 2 * u.k + 2 - scale)  # 2^bits·u ∈ [ends]
        small = 0 if ends[0] <= 0 <= ends[1] else min(abs(ends[0]), abs(ends[1]))
        big = max(abs(ends[0]), abs(ends[1]))
        shift = 2 * (m - u.bits)
        lo += (small * small) << shift
        hi += (big * big) << shift
    return lo, hi, 1 << (2 * m)


def _gaussians(ar: _Arith, pairs: list[tuple[_Uniform, _Uniform]], d: int) -> list[Interval]:
    """Intervals of d standard Gaussians from the accepted polar pairs."""
    out: list[Interval] = []
    for a, b in pairs:
        u, v = ar.uniform(a, signed=True), ar.uniform(b, signed=True)
        s = ar.add(ar.square(u), ar.square(v))
        if not s[0] > 0 or not s[1] < 1:
            raise _Undecided
        log_s = ar.ln(s)  # < 0
        minus_two_log = (ar.lo.multiply(_MINUS_TWO, log_s[1]), ar.hi.multiply(_MINUS_TWO, log_s[0]))
        factor = ar.sqrt(ar.div_pos(minus_two_log, s))
        out.extend((ar.mul_pos(u, factor), ar.mul_pos(v, factor)))
    return out[:d]


def _cells(
    ar: _Arith, wide: _Arith, centre: list[Decimal], noise: list[Interval], scale: Interval
) -> list[int]:
    """round(centre/γ + scale·noise) per coordinate, or _Undecided if an interval spans a
    cell boundary. ``centre`` is already in grid units (exact); ``wide`` has the digits to
    add it."""
    cells = []
    for c, x in zip(centre, noise, strict=True):
        y = ar.mul_pos(x, scale)
        lo = wide.lo.add(wide.lo.add(c, y[0]), _HALF)
        hi = wide.hi.add(wide.hi.add(c, y[1]), _HALF)
        k_lo = int(lo.to_integral_value(rounding=ROUND_FLOOR))
        k_hi = int(hi.to_integral_value(rounding=ROUND_FLOOR))
        if k_lo != k_hi or hi == k_hi:  # spans (or touches) a boundary k − ½
            raise _Undecided
        cells.append(k_lo)
    return cells


def _check_centre(centre: NDArray[np.float64]) -> FloatArray:
    w = np.asarray(centre, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)):
        raise ValueError("the centre must be a non-empty vector of finite numbers")
    return w


def _grid_centre(w: FloatArray) -> tuple[list[Decimal], int]:
    """w/γ exactly (a double times a power of two is a double, which Decimal holds exactly),
    and the number of integer digits the addition of the centre needs."""
    grid_centre = [Decimal(float(v) * 2.0**GRID_EXPONENT) for v in w]
    largest = max(abs(int(c)) for c in grid_centre)
    return grid_centre, len(str(largest))


def _exact_cells(
    bits: _Bits, uniforms: list[_Uniform], evaluate: Evaluator, centre: FloatArray
) -> NDArray[np.int64]:
    """The decimal path on given uniforms (refined from ``bits`` while undecided), clamped."""
    grid_centre, digits = _grid_centre(centre)
    sampler = _Sampler(bits, magnitude_digits=digits, uniforms=uniforms)
    cells = sampler.cells(evaluate, grid_centre)
    return np.array([min(max(c, -CLAMP), CLAMP) for c in cells], dtype=np.int64)


def _on_grid(k: NDArray[np.int64]) -> FloatArray:
    out: FloatArray = k.astype(np.float64) * GRID  # exact: |k| ≤ 2⁵², γ = 2^-32
    return out


def _release(
    centre: NDArray[np.float64],
    rng: np.random.Generator | None,
    setup: Callable[[_Sampler, int], Evaluator],
) -> NDArray[np.float64]:
    """The decimal path from scratch (used by the Laplace release)."""
    w = _check_centre(centre)
    grid_centre, digits = _grid_centre(w)
    sampler = _Sampler(_Bits(rng), magnitude_digits=digits)
    evaluate = setup(sampler, int(w.size))
    cells = sampler.cells(evaluate, grid_centre)
    return _on_grid(np.array([min(max(c, -CLAMP), CLAMP) for c in cells], dtype=np.int64))


def _gaussian_evaluator(pairs: list[tuple[_Uniform, _Uniform]], d: int, sigma: float) -> Evaluator:
    return lambda ar: (_gaussians(ar, pairs, d), _grid_scale(sigma))


def _ratio_interval(ar: _Arith, lo_num: int, hi_num: int, bits: int) -> Interval:
    """An interval containing [lo_num, hi_num]/2^bits: both integers are first cut to a few
    bits more than the arithmetic's precision (floor for the lower, ceiling for the upper
    end), so huge products convert to Decimal cheaply and the interval only widens."""
    keep = ar.lo.prec * 4 + 64  # > log₂(10) bits per digit, with room
    shift = max(0, min(hi_num.bit_length() - keep, bits))
    lo = lo_num >> shift
    hi = -((-hi_num) >> shift)
    denom = Decimal(1 << (bits - shift))
    return ar.lo.divide(Decimal(lo), denom), ar.hi.divide(Decimal(hi), denom)


def _norm_exponential_evaluator(
    pairs: list[tuple[_Uniform, _Uniform]],
    radial: list[_Uniform],
    d: int,
    beta: float,
    coords: list[int] | None = None,
) -> Evaluator:
    """Intervals of the coordinates ``coords`` (default all) of X = (g/‖g‖)·R with O(1)
    logarithms besides one per pair asked for: R = −ln(U₁⋯U_d) and, since a polar pair has
    g_u² + g_v² = (u² + v²)(−2 ln s/s) = −2 ln s, ‖g‖² = −2 ln(∏ s_p) over the full pairs
    (+ g_last² for odd d). The same real numbers as Σ g_i², so the same function."""
    wanted = list(range(d)) if coords is None else coords

    def evaluate(ar: _Arith) -> tuple[list[Interval], Interval]:
        full = pairs if d % 2 == 0 else pairs[:-1]
        sq: Interval = (Decimal(0), Decimal(0))
        if full:
            # ∏ s_p between exact integer bounds over 2^(Σ 2m_p) (_disc_bounds)
            lo_num, hi_num, bits = 1, 1, 0
            for a, b in full:
                lo, hi, one = _disc_bounds(a, b)
                lo_num *= lo
                hi_num *= hi
                bits += one.bit_length() - 1
            prod = _ratio_interval(ar, lo_num, hi_num, bits)
            if not prod[0] > 0 or not prod[1] < 1:
                raise _Undecided
            log_prod = ar.ln(prod)  # < 0
            sq = (ar.lo.multiply(_MINUS_TWO, log_prod[1]), ar.hi.multiply(_MINUS_TWO, log_prod[0]))
        if d % 2 == 1:
            sq = ar.add(sq, ar.square(_gaussians(ar, pairs[-1:], 1)[0]))
        if not sq[0] > 0:
            raise _Undecided
        norm = ar.sqrt(sq)
        # −ln(U₁⋯U_d): the product's bounds are exact integers over 2^(Σ bits)
        lo_num, hi_num, bits = 1, 1, 0
        for u in radial:
            lo_num *= u.k
            hi_num *= u.k + 1
            bits += u.bits
        if lo_num == 0:
            raise _Undecided
        log_p = ar.ln(_ratio_interval(ar, lo_num, hi_num, bits))
        radius = (log_p[1].copy_negate(), log_p[0].copy_negate())  # Σ −ln U_i ~ Gamma(d, 1)
        beta_grid = Decimal(float(beta) * 2.0**-GRID_EXPONENT)  # βγ, exact
        scaled = ar.div_pos(radius, (beta_grid, beta_grid))  # R/(βγ): the norm in grid units
        by_pair: dict[int, list[Interval]] = {}
        out = []
        for i in wanted:
            if i // 2 not in by_pair:
                by_pair[i // 2] = _gaussians(ar, [pairs[i // 2]], 2)
            out.append(ar.div_pos(by_pair[i // 2][i % 2], norm))
        return out, scaled

    return evaluate


def _grid_scale(value: float) -> Interval:
    """value/γ as an exact one-point interval (value a positive double, γ a power of two)."""
    exact = Decimal(float(value) * 2.0**GRID_EXPONENT)  # exact: scaling by a power of two
    return exact, exact


def _check_positive(name: str, value: float) -> None:
    if not np.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")


# ---- the fast path: the same function in doubles, with a rigorous error bound ---------------

_U: Final[float] = 2.0**-53  # unit roundoff of double precision
#: κ: multiplies every first-order bound (second-order terms and the bound's own roundings)
_KAPPA: Final[float] = 1.0 + 2.0**-16
#: every relative error bound of the fast path must be at most this, else the decimal path
_SMALL: Final[float] = 2.0**-20
#: ln 2 = _LN2_HI + _LN2_LO + O(2⁻⁸⁶) (fdlibm's split, checked in the tests): _LN2_HI has 32
#: significant bits, so e·_LN2_HI is exact for every exponent e of a double
_LN2_HI: Final[float] = float.fromhex("0x1.62e42fee00000p-1")
_LN2_LO: Final[float] = float.fromhex("0x1.a39ef35793c76p-33")
#: the double nearest 1/√2 (slightly above it): mantissas are brought into [this, 2·this)
_SQRT_HALF: Final[float] = 0.7071067811865476
#: 1/(2k + 1), k = 0..10, each rounded to nearest (relative error ≤ u; 1 exactly)
_ATANH: Final[tuple[float, ...]] = tuple(1.0 / (2 * k + 1) for k in range(11))
#: the fast path is used only for noise scales (grid units) in [2^-500, 2^500]
_SCALE_RANGE: Final[tuple[float, float]] = (2.0**-500, 2.0**500)
#: noise values (grid units) beyond this go to the decimal path (keeps |z| < 2⁵¹)
_Y_LIMIT: Final[float] = 2.0**50
#: centres beyond this (|c| > 2¹⁹, i.e. |c/γ| > 2⁵¹) go to the decimal path
_CENTRE_LIMIT: Final[float] = 2.0**19


def _ln(x: FloatArray) -> tuple[FloatArray, FloatArray]:
    """ln x and a bound on |result − ln x| for positive finite doubles, from IEEE +, −, ×, ÷
    only: bound (L) of the module docstring, times κ."""
    m, e_int = np.frexp(x)
    low = m < _SQRT_HALF
    m = np.where(low, 2.0 * m, m)  # exact
    e = (e_int - low).astype(np.float64)  # exact small integers
    t = (m - 1.0) / (m + 1.0)  # m − 1 exact (Sterbenz)
    w = t * t
    p = np.full_like(w, _ATANH[-1])
    for c in reversed(_ATANH[:-1]):  # Horner: p ← fl(fl(p·w) + c), in place
        p *= w
        p += c
    lm = (2.0 * t) * p
    tail = e * _LN2_LO + lm
    out = e * _LN2_HI + tail  # e·LN2_HI exact
    err = (6.0 * _U) * np.abs(lm) + _U * np.abs(tail) + _U * np.abs(out) + 2.0**-80 * np.abs(e)
    return out, err * _KAPPA


def _signed_mids(words: NDArray[np.uint64]) -> tuple[FloatArray, float]:
    """û, the double nearest the centre of the bit interval of u = 2U − 1, and h, the half
    width of that interval: |u − û| ≤ h + u·|û| (words: (..., first words), top word first)."""
    a = words[..., 0].astype(np.float64)  # < 2³²: exact
    if words.shape[-1] == 1:
        return (2.0 * a + 1.0) * 2.0**-32 - 1.0, 2.0**-32  # exact
    b = words[..., 1].astype(np.float64)
    # a·2⁻³¹ − 1 and (b + ½)·2⁻⁶³ are exact; their sum is rounded once
    return (a * 2.0**-31 - 1.0) + (b + 0.5) * 2.0**-63, 2.0**-64


def _unsigned_lows(words: NDArray[np.uint64]) -> tuple[FloatArray, FloatArray]:
    """x̂ ≈ k·2⁻ᵇ, the lower end of the bit interval of U (k its top 64 or 32 bits), and a
    bound on |ln U − ln x̂| for every U in the interval: 1/k (+ 1.01u for the rounding of k)."""
    a = words[..., 0].astype(np.float64)
    if words.shape[-1] == 1:
        with np.errstate(divide="ignore"):
            return a * 2.0**-32, (1.0 / a) * (1.0 + 4.0 * _U)
    k = a * 2.0**32 + words[..., 1].astype(np.float64)  # fl(k): one rounding
    with np.errstate(divide="ignore"):
        inverse = (1.0 / k) * (1.0 + 4.0 * _U)  # ≥ 1/k exactly
    return k * 2.0**-64, inverse + 1.01 * _U


def _polar_status(words: NDArray[np.uint64]) -> NDArray[np.int8]:
    """1 accepted, 0 rejected, −1 not decided in doubles, for pairs words[i, 0], words[i, 1]."""
    ua, h = _signed_mids(words[:, 0])
    ub, _ = _signed_mids(words[:, 1])
    s = ua * ua + ub * ub  # |s_true − s| ≤ 5u·s + 4h + 2⁻⁶² ≤ 2⁻⁴⁸ + 4h (s ≤ 2)
    margin = 2.0**-48 + 4.0 * h
    accept = (s > margin) & (s < 1.0 - margin)
    reject = s > 1.0 + margin
    status: NDArray[np.int8] = np.where(accept, 1, np.where(reject, 0, -1)).astype(np.int8)
    return status


class _Pairs:
    """Accepted polar pairs: their first words, and the rare pairs refined while deciding."""

    def __init__(self, words: NDArray[np.uint64], refined: dict[int, tuple[_Uniform, _Uniform]]):
        self.words = words  # (pairs, 2, first words)
        self.refined = refined

    def uniforms(self, index: int) -> tuple[_Uniform, _Uniform]:
        got = self.refined.get(index)
        if got is not None:
            return got
        return _Uniform.from_words(self.words[index, 0]), _Uniform.from_words(self.words[index, 1])

    def run(self, first: int, count: int) -> list[tuple[_Uniform, _Uniform]]:
        """Pairs first … first + count − 1 as uniforms (the refined ones as refined)."""
        block = self.words[first : first + count]
        a = _Uniform.many(block[:, 0])
        b = _Uniform.many(block[:, 1])
        out = list(zip(a, b, strict=True))
        for index, pair in self.refined.items():
            if first <= index < first + count:
                out[index - first] = pair
        return out


def _polar_pairs(bits: _Bits, count: int) -> _Pairs:
    """``count`` accepted pairs of the polar method, 0 < s < 1 decided exactly (in doubles
    when the bound decides, else on the integer bit intervals, refining while undecided)."""
    fw = _FIRST_WORDS
    chunks: list[NDArray[np.uint64]] = []
    refined: dict[int, tuple[_Uniform, _Uniform]] = {}
    got = 0
    while got < count:
        need = count - got
        pairs = need * 4 // 3 + 2  # the disc keeps π/4 of the square
        words = bits.array(2 * fw * pairs).reshape(pairs, 2, fw)
        status = _polar_status(words)
        late: dict[int, tuple[_Uniform, _Uniform]] = {}
        for i in np.flatnonzero(status < 0):
            a, b = _Uniform.from_words(words[i, 0]), _Uniform.from_words(words[i, 1])
            sampler = _Sampler(bits, uniforms=[a, b])
            decision = _disc_decision(a, b)
            while decision is None:
                sampler.refine_all()
                decision = _disc_decision(a, b)
            status[i] = 1 if decision else 0
            if decision and a.bits > _WORD * fw:
                late[int(i)] = (a, b)
        accepted = np.flatnonzero(status == 1)[:need]
        for index, pair in late.items():
            rank = int(np.searchsorted(accepted, index))
            if rank < accepted.size and int(accepted[rank]) == index:
                refined[got + rank] = pair
        chunks.append(words[accepted])
        got += int(accepted.size)
    return _Pairs(np.concatenate(chunks), refined)


def _signed_mids_exact(words: NDArray[np.uint64]) -> tuple[FloatArray, FloatArray, float]:
    """(û, û_lo, h): the centre of u's bit interval exactly as û + û_lo (TwoSum of the two
    exact parts), û the double nearest it, and the half width h."""
    a = words[..., 0].astype(np.float64)
    if words.shape[-1] == 1:
        return (2.0 * a + 1.0) * 2.0**-32 - 1.0, np.zeros_like(a), 2.0**-32
    t1 = a * 2.0**-31 - 1.0
    t2 = (words[..., 1].astype(np.float64) + 0.5) * 2.0**-63
    hi = t1 + t2
    back = hi - t1
    lo = (t1 - (hi - back)) + (t2 - back)  # Knuth's TwoSum: t1 + t2 = hi + lo exactly
    return hi, lo, 2.0**-64


def _square_exact(x: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(p, q) with p + q = x² exactly (Dekker's product with Veltkamp's split; no overflow or
    underflow for 2⁻⁶⁴ ≤ |x| ≤ 1)."""
    c = 134217729.0 * x  # 2²⁷ + 1
    x_hi = c - (c - x)
    x_lo = x - x_hi
    p = x * x
    q = ((x_hi * x_hi - p) + 2.0 * x_hi * x_lo) + x_lo * x_lo
    return p, q


def _polar_gaussians(pairs: _Pairs) -> tuple[FloatArray, FloatArray, NDArray[np.bool_]]:
    """Per pair i: (ĝ_u, ĝ_v), bounds on their errors, and whether the bounds are valid
    (every relative bound ≤ 2⁻²⁰, no refined pair); shapes (P, 2), (P, 2), (P,)."""
    ua, ua_lo, h = _signed_mids_exact(pairs.words[:, 0])
    ub, ub_lo, _ = _signed_mids_exact(pairs.words[:, 1])
    # s at the centres, (û + û_lo)² + (v̂ + v̂_lo)², as s_hi + s_lo within 28u²·s_hi
    pa, qa = _square_exact(ua)
    pb, qb = _square_exact(ub)
    s = pa + pb
    back = s - pa
    s_lo = ((pa - (s - back)) + (pb - back)) + (qa + qb) + (2.0 * ua * ua_lo + 2.0 * ub * ub_lo)
    # the real s (u within h of its centre): |s − (s_hi + s_lo)| ≤ 4h + 2h² + 2⁻¹⁰⁰·s_hi
    e_s = (4.0 * h + 2.0 * h * h + 2.0**-100 * s) * _KAPPA
    gap = np.abs(s_lo) + e_s  # |s − s_hi| ≤ gap
    ok = s - gap > 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        safe_s = np.where(ok, s, 0.5)
        rho_s = gap / (safe_s - gap) * _KAPPA
        log_hi, err_log = _ln(safe_s)
        delta = s_lo / safe_s  # ln(s_hi + s_lo) = ln s_hi + δ − O(δ²), |δ| ≤ 4.2u
        log_s = log_hi + delta
        e_log = (
            err_log + _U * np.abs(log_s) + 22.0 * _U * _U + e_s / (safe_s - np.abs(s_lo) - e_s)
        ) * _KAPPA
        rho_log = e_log / (np.abs(log_s) - e_log) * _KAPPA
        q = (-2.0 * log_s) / safe_s
        rho_q = (rho_log + rho_s + _U) * _KAPPA
        f = np.sqrt(q)
        rho_f = (0.5 * rho_q + _U) * _KAPPA
        ok &= (rho_s <= _SMALL) & (rho_log > 0.0) & (rho_log <= _SMALL) & (rho_f <= _SMALL)
        g = np.stack([ua * f, ub * f], axis=1)
        u_abs = np.abs(np.stack([ua, ub], axis=1))
        err = (f[:, None] * (u_abs * (rho_f[:, None] + 2.0 * _U) + h)) / (1.0 - rho_f[:, None])
        err *= _KAPPA
    for i in pairs.refined:
        ok[i] = False
    g = np.where(ok[:, None], g, 0.0)
    err = np.where(ok[:, None], err, np.inf)
    return g, err, ok


def _fast_cells(
    centre: FloatArray, y: FloatArray, bound: FloatArray
) -> tuple[FloatArray, NDArray[np.bool_]]:
    """Cells of centre/γ + y (as exact integer-valued doubles) and which of them the enclosure
    decides; |centre| ≤ 2¹⁹ and |y| ≤ 2⁵⁰, so |cell| < 2⁵² needs no clamp. ``bound`` is the
    precomputed E_y + u(½ + |ŷ|)(1 + 2u) + 2⁻⁵² (module docstring)."""
    grid = centre * 2.0**GRID_EXPONENT  # exact
    whole = np.rint(grid)
    z = (grid - whole) + y  # grid − whole exact, |·| ≤ ½
    k0 = np.rint(z)
    decided = (0.5 - np.abs(z - k0)) > bound  # z − k0 exact
    cells: FloatArray = whole + k0  # exact: both integers, |sum| < 2⁵²
    return cells, decided


def _decision_bound(y: FloatArray, err: FloatArray) -> FloatArray:
    out: FloatArray = (err + _U * (0.5 + np.abs(y)) * (1.0 + 2.0 * _U)) * _KAPPA + 2.0**-52
    return out


class _Block:
    """Noise of ``count`` releases of dimension ``dim``, drawn up front; see subclasses."""

    def __init__(self, count: int, dim: int, rng: np.random.Generator | None) -> None:
        if count < 1 or dim < 1:
            raise ValueError("a block needs count ≥ 1 and dim ≥ 1")
        self.count = count
        self.dim = dim
        self._bits = _Bits(rng)
        self._pairs_per = (dim + 1) // 2
        self._used = np.zeros(count, dtype=bool)
        self._y = np.zeros((count, dim))
        self._err = np.full((count, dim), np.inf)  # rigorous bound on |ŷ − y| (fast path)
        self._bound = np.full((count, dim), np.inf)

    def _keep_fast(self, y: FloatArray, e_y: FloatArray, valid: NDArray[np.bool_]) -> None:
        """The fast path's values and bounds where ``valid``, the decimal path elsewhere."""
        self._y = np.where(valid, y, 0.0)
        self._err = np.where(valid, e_y, np.inf)
        self._bound = np.where(valid, _decision_bound(y, e_y), np.inf)

    def release(self, j: int, centre: NDArray[np.float64]) -> FloatArray:
        """γ·round((centre + X_j)/γ) clamped, X_j the block's j-th noise vector (used once)."""
        w = _check_centre(centre)
        if w.size != self.dim:
            raise ValueError(f"the centre must have {self.dim} coordinates")
        if self._used[j]:
            raise RuntimeError("each noise vector of a block is released once")
        self._used[j] = True
        if float(np.max(np.abs(w))) <= _CENTRE_LIMIT:
            grid, decided = _fast_cells(w, self._y[j], self._bound[j])
            if bool(decided.all()):
                out: FloatArray = grid * GRID  # exact: |grid| < 2⁵², γ a power of two
                return out
            cells = np.where(decided, grid, 0.0).astype(np.int64)
        else:
            cells, decided = np.zeros(self.dim, dtype=np.int64), np.zeros(self.dim, dtype=bool)
        return _on_grid(self._fallback(j, w, cells, decided))

    def _exact(self, j: int, centre: NDArray[np.float64]) -> FloatArray:
        """The decimal path alone on the j-th noise vector (for tests; does not mark it used)."""
        w = _check_centre(centre)
        return _on_grid(
            self._fallback(j, w, np.zeros(self.dim, np.int64), np.zeros(self.dim, bool))
        )

    def _pair_uniforms(self, j: int) -> list[tuple[_Uniform, _Uniform]]:
        return self._pairs.run(j * self._pairs_per, self._pairs_per)

    def _fallback(
        self, j: int, w: FloatArray, cells: NDArray[np.int64], decided: NDArray[np.bool_]
    ) -> NDArray[np.int64]:
        raise NotImplementedError

    _pairs: _Pairs


class GaussianBlock(_Block):
    """``count`` exact releases γ·round((c_j + X_j)/γ), X_j ~ N(0, σ²I) in R^dim (module
    docstring: fast path with a rigorous bound, decimal path per undecided coordinate)."""

    def __init__(
        self, count: int, dim: int, *, sigma: float, rng: np.random.Generator | None = None
    ) -> None:
        _check_positive("sigma", sigma)
        super().__init__(count, dim, rng)
        self.sigma = float(sigma)
        self._pairs = _polar_pairs(self._bits, count * self._pairs_per)
        scale = self.sigma * 2.0**GRID_EXPONENT  # σ/γ, exact
        if not _SCALE_RANGE[0] <= scale <= _SCALE_RANGE[1]:
            return  # every coordinate takes the decimal path
        g, err, _ = _polar_gaussians(self._pairs)
        g = g.reshape(count, -1)[:, :dim]
        err = err.reshape(count, -1)[:, :dim]
        y = g * scale
        e_y = (scale * err + _U * np.abs(y)) * _KAPPA
        valid = np.isfinite(e_y) & (np.abs(y) <= _Y_LIMIT)
        self._keep_fast(y, e_y, valid)

    def _fallback(
        self, j: int, w: FloatArray, cells: NDArray[np.int64], decided: NDArray[np.bool_]
    ) -> NDArray[np.int64]:
        """The undecided coordinates on the decimal path, with only their pairs' uniforms."""
        todo = np.flatnonzero(~decided)
        first = j * self._pairs_per
        pair_index = sorted({int(i) // 2 for i in todo})
        pairs = [self._pairs.uniforms(first + p) for p in pair_index]
        position = {p: r for r, p in enumerate(pair_index)}
        picks = [2 * position[int(i) // 2] + int(i) % 2 for i in todo]

        def evaluate(ar: _Arith) -> tuple[list[Interval], Interval]:
            g = _gaussians(ar, pairs, 2 * len(pairs))
            return [g[p] for p in picks], _grid_scale(self.sigma)

        uniforms = [u for pair in pairs for u in pair]
        exact = _exact_cells(self._bits, uniforms, evaluate, w[todo])
        out = cells.copy()
        out[todo] = exact
        return out


class NormExponentialBlock(_Block):
    """``count`` exact releases γ·round((c_j + X_j)/γ), X_j ∝ exp(−β‖x‖) in R^dim (module
    docstring: fast path with a rigorous bound, decimal path for the coordinates it leaves
    open)."""

    def __init__(
        self, count: int, dim: int, *, beta: float, rng: np.random.Generator | None = None
    ) -> None:
        _check_positive("beta", beta)
        super().__init__(count, dim, rng)
        self.beta = float(beta)
        fw = _FIRST_WORDS
        self._pairs = _polar_pairs(self._bits, count * self._pairs_per)
        self._radial = self._bits.array(fw * count * dim).reshape(count, dim, fw)
        beta_grid = self.beta * 2.0**-GRID_EXPONENT  # βγ, exact (1/βγ: the scale in cells)
        if not _SCALE_RANGE[0] <= beta_grid <= _SCALE_RANGE[1]:
            return  # every vector takes the decimal path
        g, err_g, _ = _polar_gaussians(self._pairs)
        g = g.reshape(count, -1)[:, :dim]
        err_g = err_g.reshape(count, -1)[:, :dim]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # ‖g‖: |Ĝ − ‖ĝ‖| ≤ 2u·Ĝ + (sum error)/(2Ĝ) (squares, sum, √), ‖ĝ − g‖ ≤ ‖e_g‖
            sq, sq_err = compensated_row_sums(g * g)
            norm = np.sqrt(sq)
            e_norm = np.sqrt(np.sum(err_g * err_g, axis=1) * (1.0 + 2.0**-16)) * _KAPPA
            abs_norm = (2.0 * _U * norm + 0.5 * sq_err / norm + e_norm) * _KAPPA
            rho_norm = abs_norm / (norm - abs_norm) * _KAPPA
            # R = Σ −ln U_i: |R̂ − R| ≤ Σe_i + summation error
            x, e_low = _unsigned_lows(self._radial)
            log_x, err_log = _ln(np.where(x > 0.0, x, 0.5))
            radius, radius_err = compensated_row_sums(-log_x)
            e_terms = np.sum(err_log + e_low, axis=1) * (1.0 + 2.0**-16)
            e_radius = (e_terms + radius_err) * _KAPPA
            rho_radius = e_radius / (radius - e_radius) * _KAPPA
            # A = R/(βγ‖g‖), y_i = g_i·A
            scale = radius / (beta_grid * norm)
            rho_scale = (rho_radius + rho_norm + 2.0 * _U) * _KAPPA
            y = g * scale[:, None]
            e_y = (
                scale[:, None]
                * (np.abs(g) * (rho_scale[:, None] + _U) + err_g)
                / (1.0 - rho_scale[:, None])
                * _KAPPA
            )
        ok = (
            np.all(x > 0.0, axis=1)
            & (norm > abs_norm)
            & (rho_norm > 0.0)
            & (rho_norm <= _SMALL)
            & (radius > e_radius)
            & (rho_radius > 0.0)
            & (rho_radius <= _SMALL)
            & (rho_scale <= _SMALL)
        )
        valid = ok[:, None] & np.isfinite(e_y) & (np.abs(y) <= _Y_LIMIT)
        self._keep_fast(y, e_y, valid)

    def _fallback(
        self, j: int, w: FloatArray, cells: NDArray[np.int64], decided: NDArray[np.bool_]
    ) -> NDArray[np.int64]:
        """The undecided coordinates on the decimal path. They share the norm and the radius
        with the others, so every uniform of the vector takes part (and is refined if
        needed), but only two logarithms plus one per undecided pair are evaluated."""
        todo = np.flatnonzero(~decided)
        pairs = self._pair_uniforms(j)
        radial = _Uniform.many(self._radial[j])
        coords = [int(i) for i in todo]
        evaluate = _norm_exponential_evaluator(pairs, radial, self.dim, self.beta, coords)
        uniforms = [u for pair in pairs for u in pair] + radial
        out = cells.copy()
        out[todo] = _exact_cells(self._bits, uniforms, evaluate, w[todo])
        return out


def norm_exponential_release(
    centre: NDArray[np.float64], *, beta: float, rng: np.random.Generator | None = None
) -> NDArray[np.float64]:
    """The exact grid point γ·round((w + X)/γ), X ~ ν(x) ∝ exp(−β‖x‖) (module docstring)."""
    w = _check_centre(centre)
    return NormExponentialBlock(1, int(w.size), beta=beta, rng=rng).release(0, w)


def gaussian_release(
    centre: NDArray[np.float64], *, sigma: float, rng: np.random.Generator | None = None
) -> NDArray[np.float64]:
    """The exact grid point γ·round((w + X)/γ), X ~ N(0, σ²I)."""
    w = _check_centre(centre)
    return GaussianBlock(1, int(w.size), sigma=sigma, rng=rng).release(0, w)


def laplace_release(
    centre: NDArray[np.float64], *, scale: float, rng: np.random.Generator | None = None
) -> NDArray[np.float64]:
    """The exact grid point γ·round((w + X)/γ), X with i.i.d. Laplace(0, b) coordinates
    (decimal path only)."""
    _check_positive("scale", scale)

    def setup(sampler: _Sampler, d: int) -> Evaluator:
        magnitudes = sampler.new_uniforms(d)
        signs = [w & 1 for w in sampler._bits.words(d)]

        def evaluate(ar: _Arith) -> tuple[list[Interval], Interval]:
            out: list[Interval] = []
            for u, negative in zip(magnitudes, signs, strict=True):
                if u.k == 0:
                    raise _Undecided
                log_u = ar.ln(ar.uniform(u))
                e = (log_u[1].copy_negate(), log_u[0].copy_negate())  # −ln U ~ Exp(1)
                out.append((e[1].copy_negate(), e[0].copy_negate()) if negative else e)
            return out, _grid_scale(scale)

        return evaluate

    return _release(centre, rng, setup)


# ---- enclosures: the real noise vector itself, as doubles with a proved error bound ----------


#: every fast-path coordinate of an enclosure is within this fraction of ‖ŷ‖/√d (the others
#: take the decimal path, 2⁻⁶⁰ relative), so its radius is at most 2⁻³⁹‖value‖
#: (:func:`service.dp.optimize.certified.certificate_floor` relies on it)
ENCLOSURE_RELATIVE: Final[float] = 2.0**-40


class Enclosure(NamedTuple):
    """A real random vector X known as doubles: ‖X − value‖₂ ≤ radius (rigorously).

    Used where noise enters a computation instead of being added to a released value
    (objective perturbation, :mod:`service.dp.optimize.certified`): X is the real-valued noise of
    the
    continuous mechanism, a deterministic function of exact uniforms, and ``value`` its
    evaluation with the same proved error bounds as the fast path above (the decimal path
    where those bounds are too loose, or above 2⁻⁴⁰‖value‖/√d): radius ≤ 2⁻³⁹‖value‖."""

    value: FloatArray
    radius: float


def _unit_near(scale: float) -> float:
    """The power of two nearest ``scale`` (a positive finite double)."""
    return math.ldexp(1.0, round(math.log2(scale)))


def _enclose(
    block: _Block, unit: float, intervals: Callable[[list[int]], list[Interval]]
) -> Enclosure:
    """Block 0's noise in units of ``unit`` (fast path), the coordinates the fast path left
    open from ``intervals`` (decimal), scaled back by the power of two ``unit`` (exact)."""
    y = block._y[0].copy()
    err = block._err[0].copy()
    known = np.isfinite(err)
    # a fast bound above ENCLOSURE_RELATIVE·‖ŷ‖/√d (rare: a tiny Gaussian norm or radial
    # sum) goes to the decimal path too, so that radius ≤ 2⁻³⁹‖value‖ always
    cap = ENCLOSURE_RELATIVE * math.sqrt(float(np.sum(y[known] ** 2)) / y.size)
    todo = [int(i) for i in np.flatnonzero(~known | (err > cap))]
    if todo:
        for i, (lo, hi) in zip(todo, intervals(todo), strict=True):
            mid = float((lo + hi) / 2)  # Decimal → double: correctly rounded
            gap = max(hi - Decimal(mid), Decimal(mid) - lo)  # exact (Decimal holds doubles)
            y[i] = mid
            err[i] = math.nextafter(float(gap), math.inf)
    radius = math.sqrt(math.fsum(float(e) * float(e) for e in err))
    # fsum is correctly rounded, √ ≤ ½ ulp; two ulps up cover both and the squares' roundings
    radius = math.nextafter(math.nextafter(radius * (1.0 + 4.0 * _U), math.inf), math.inf)
    return Enclosure(value=y * unit, radius=radius * unit)


def _decimal_intervals(
    bits: _Bits, uniforms: list[_Uniform], evaluate: Evaluator
) -> list[Interval]:
    """The evaluator's noise × scale intervals, refining the uniforms while undecided or
    wider than 2⁻⁶⁰ relative (either only happens with probability ~2⁻⁶⁰ per draw)."""
    sampler = _Sampler(bits, uniforms=uniforms)
    while True:
        ar = sampler.arith()
        try:
            noise, scale = evaluate(ar)
            out = [ar.mul_pos(x, scale) for x in noise]
            tight = Decimal(2) ** -60
            if all(hi - lo <= tight * (abs(hi) + abs(lo) + tight) for lo, hi in out):
                return out
        except _Undecided:
            pass
        sampler.refine_all()


def norm_exponential_enclosure(
    d: int, *, beta: float, rng: np.random.Generator | None = None
) -> Enclosure:
    """X ~ ν(x) ∝ exp(−β‖x‖) on ℝ^d, enclosed. X = unit·X′ with X′ ~ ν_{β·unit} for the power
    of two unit ≈ d/β, so X′ is of order one; X′ is block 0 of a :class:`NormExponentialBlock`
    whose grid-unit law is ν_{β·unit} (β_block = β·unit/γ, both factors powers of two)."""
    _check_positive("beta", beta)
    unit = _unit_near(d / beta)
    block = NormExponentialBlock(1, d, beta=beta * unit * 2.0**GRID_EXPONENT, rng=rng)

    def intervals(coords: list[int]) -> list[Interval]:
        pairs = block._pair_uniforms(0)
        radial = _Uniform.many(block._radial[0])
        evaluate = _norm_exponential_evaluator(pairs, radial, d, block.beta, coords)
        return _decimal_intervals(block._bits, [u for p in pairs for u in p] + radial, evaluate)

    return _enclose(block, unit, intervals)


def gaussian_enclosure(
    d: int, *, sigma: float, rng: np.random.Generator | None = None
) -> Enclosure:
    """X ~ N(0, σ²I_d), enclosed: X = unit·X′, X′ ~ N(0, (σ/unit)²) with unit ≈ σ a power of
    two, X′ the grid-unit noise of a :class:`GaussianBlock` with σ_block = (σ/unit)·γ."""
    _check_positive("sigma", sigma)
    unit = _unit_near(sigma)
    block = GaussianBlock(1, d, sigma=sigma / unit * GRID, rng=rng)

    def intervals(coords: list[int]) -> list[Interval]:
        pairs = block._pair_uniforms(0)
        evaluate = _gaussian_evaluator(pairs, 2 * len(pairs), block.sigma)
        everything = _decimal_intervals(block._bits, [u for p in pairs for u in p], evaluate)
        return [everything[i] for i in coords]

    return _enclose(block, unit, intervals)
