"""The fast path of the lattice release: the same function of the same uniforms in
doubles, with a rigorous error bound, and the blocks that draw many releases at once.

The release and its privacy argument are :mod:`service.dp.noise.lattice.exact`'s; this
layer only decides most coordinates faster, and hands the others to the exact layer.

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
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from service.dp.noise.lattice import exact
from service.dp.noise.lattice.exact import (
    _WORD,
    GRID,
    GRID_EXPONENT,
    Evaluator,
    FloatArray,
    Interval,
    _Arith,
    _Bits,
    _check_centre,
    _check_positive,
    _disc_decision,
    _exact_cells,
    _gaussians,
    _grid_scale,
    _norm_exponential_evaluator,
    _on_grid,
    _release,
    _Sampler,
    _Undecided,
    _Uniform,
)
from service.dp.noise.rounding import compensated_row_sums

__all__ = [
    "LN2_HI",
    "LN2_LO",
    "GaussianBlock",
    "NormExponentialBlock",
    "gaussian_release",
    "laplace_release",
    "norm_exponential_release",
]


# ---- the fast path: the same function in doubles, with a rigorous error bound ---------------

_U: Final[float] = 2.0**-53  # unit roundoff of double precision
#: κ: multiplies every first-order bound (second-order terms and the bound's own roundings)
_KAPPA: Final[float] = 1.0 + 2.0**-16
#: every relative error bound of the fast path must be at most this, else the decimal path
_SMALL: Final[float] = 2.0**-20
#: ln 2 = LN2_HI + LN2_LO + O(2⁻⁸⁶) (fdlibm's split, checked in the tests): LN2_HI has 32
#: significant bits, so e·LN2_HI is exact for every exponent e of a double
LN2_HI: Final[float] = float.fromhex("0x1.62e42fee00000p-1")
LN2_LO: Final[float] = float.fromhex("0x1.a39ef35793c76p-33")
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
    tail = e * LN2_LO + lm
    out = e * LN2_HI + tail  # e·LN2_HI exact
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
    fw = exact._FIRST_WORDS  # read at call time: tests lower it
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
        fw = exact._FIRST_WORDS  # read at call time: tests lower it
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
