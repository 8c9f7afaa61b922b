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

Design note. Drawing Z ∈ ℤ^d with p(z) ∝ exp(−β′‖z‖) by rejection from a product discrete
Gaussian proposal does not work: a Gaussian's tail is lighter than exp(−β′r), so no constant
M gives exp(−β′r) ≤ M·exp(−r²/2σ²) for all r (AM–GM gives the reverse inequality; the
acceptance probability exp(−(r − β′σ²)²/2σ²) is the one for a Gaussian *target* from an
exponential proposal, CKS's discrete Gaussian). Sampling the rounding cell of the continuous
mechanism exactly, as here, needs no discrete law of its own, no rounding of the centre and
no inflated sensitivity (Δ + γ√d)/γ.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = ["CLAMP", "GRID", "GRID_EXPONENT", "RELEASE_NOTE", "Interval"]

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
