"""Private selection by random repetition (issue 28 item 2): Liu & Talwar 2019 (random stopping)
and Papernot & Steinke 2022 (PS22, truncated negative binomial number of runs). Pure numerics.

The algorithm A. Given k candidate settings (chosen without looking at the data), a pure
per-repetition budget ε₀ = ε_t + ε_s and a law D_{η,γ} for the number of runs:

1. draw K ~ D_{η,γ} (independent of the data);
2. for j = 1..K (the base algorithm Q, run K times independently): draw a candidate c uniformly
   at random from the k; fit it on **all n rows** with the base mechanism at (ε_t, 0); count
   e = #training rows the fitted model misclassifies; release to A the triple
   (c, w, s = e + Z), Z ~ discrete Laplace of scale b = 1/ε_s (:mod:`service.dp.noise.discrete`,
   exact);
3. output the triple with the smallest s (ties broken by a fresh uniform 62-bit key u drawn with
   each run, then the candidate's index, then the model's coefficients' bytes: a total order on
   Q's outputs (c, w, s, u), as PS22 Thm 2 requires). Only the model w and c are released.

**Q is ε₀-DP.** The fit is ε_t-DP (its mechanism's docstring; run at δ = 0, so only pure-ε
mechanisms qualify). For a *fixed* model w, replacing one row changes the error count e by at
most 1 (that row's own 0/1 error): sensitivity Δ = 1 (for a numeric label e is the quantised
clipped squared error, Δ = 64, and b = Δ/ε_s: :mod:`service.dp.analysis.task_scores`), so
s = e + Z with the discrete Laplace of scale b is (Δ/b) = ε_s-DP (pmf ratio
e^{(|x−e′|−|x−e|)/b} ≤ e^{Δ/b}). The candidate is drawn independently of the data.
Adaptive basic composition: (c, w, s) is (ε_t + ε_s)-DP; the tie-break key is
data-independent.

**The law of K** (PS22 Def. 1), for η ∈ [0, 1] and γ ∈ (0, 1), on k = 1, 2, …:

    P[K = k] = (1 − γ)^k · c_k / (γ^{−η} − 1),   c_k = ∏_{ℓ=0}^{k−1} (ℓ + η)/(ℓ + 1)   (η > 0)
    P[K = k] = (1 − γ)^k / (k · ln(1/γ))                                          (η = 0)

(Σ_k c_k x^k = (1 − x)^{−η} − 1 by the binomial series, at x = 1 − γ: the normaliser; the
η → 0 limit of c_k/η is 1/k, the logarithmic law.) η = 1 is the geometric law
P[K = k] = γ(1 − γ)^{k−1}: Liu & Talwar's random stopping (stop after each run with probability γ).
Mean μ = η(1 − γ)/(γ(1 − γ^η)) (η > 0), (1/γ − 1)/ln(1/γ) (η = 0). Generating function
G(s) = E[s^K] = ((1 − (1 − γ)s)^{−η} − 1)/(γ^{−η} − 1), resp. ln(1 − (1 − γ)s)/ln γ; the
probability that a given candidate is never tried is G(1 − 1/k).

*Exact sampler* (:meth:`RepetitionLaw.sample`): propose J geometric on {1, 2, …}
(Bernoulli(γ) trials with γ's exact rational value until the first success), accept with
probability a_J = ∏_{ℓ=1}^{J−1} (ℓ + η)/(ℓ + 1) ≤ 1 (η ≤ 1), as J − 1 independent exact
Bernoulli draws. Accepted J has probability ∝ γ(1 − γ)^{J−1}·a_J ∝ (1 − γ)^J c_J (η > 0; for
η = 0, a_J = 1/J): exactly the law above.

**Accounting.** Rényi DP of Q: an ε₀-DP pair of output laws is a post-processing of binary
randomized response with e^{ε₀} odds (Kairouz, Oh & Viswanath 2015), so by data processing
(Mironov 2017) its Rényi divergence of order α is at most that of randomized response:

    ε_Q(α) = (1/(α − 1)) ln[(e^{αε₀} + e^{(1−α)ε₀}) / (1 + e^{ε₀})]  ≤ ε₀,  ε_Q(∞) = ε₀.

PS22 Thm 2: if Q is (λ, ε_Q(λ))-RDP and (λ̂, ε_Q(λ̂))-RDP, A (releasing only the best) is
(λ, ε_A(λ))-RDP with

    ε_A(λ) = ε_Q(λ) + (1 + η)·[(1 − 1/λ̂)·ε_Q(λ̂) + ln(1/γ)/λ̂] + ln(μ)/(λ − 1),

minimised over λ̂ ∈ :data:`ORDERS` ∪ {∞} (at λ̂ = ∞ the bracket is ε₀), then made monotone in λ
(RDP is non-decreasing in the order). Conversion to (ε, δ) for δ > 0 (Canonne, Kamath & Steinke
2020 Prop. 12; Asoodeh et al. 2020):

    ε(δ) = min_λ  ε_A(λ) + ln(1 − 1/λ) − (ln δ + ln λ)/(λ − 1).

Pure DP (δ = 0): letting λ, λ̂ → ∞ in Thm 2 gives ε_A = (2 + η)·ε₀ (PS22's pure-DP corollary;
for η = 1 Liu & Talwar's 3ε₀ bound for random stopping). The reported total is the smaller of
the pure bound and, when δ > 0, the RDP conversion — each is a valid (ε, δ) guarantee. These
are the formulas of Google's ``dp-accounting`` (``RepeatAndSelectDpEvent`` in its RDP
accountant, with the inner event the binary randomized response): the tests check them
against it.

**Per-repetition budget.** :func:`solve_budget` finds the largest ε₀ with total(ε₀) ≤ ε (the
total is increasing in ε₀): ε₀ = ε/(2 + η) when δ = 0 (rounded down in exact arithmetic), else
the larger of that and a bisection on the RDP conversion, to a relative 1e−9, checked to stay
≤ ε. The ledger charges exactly the request (ε, δ); what A uses is ≤ it.

**Runs with a Rényi curve (Gaussian runs).** Thm 2 needs only Q's RDP at the orders λ and λ̂,
so Q need not be pure. For a fit whose runs are T Gaussian releases at noise multiplier z
(``noisy_gd``: RDP α·T/(2z²) = α·μ_r²/2 exactly, μ_r = √T/z, with the floating-point margin
inside the added σ — :func:`service.dp.mechanisms.noisy_gd.rdp_curve`), Q = (fit, noisy score)
is an adaptive composition, so its RDP is the sum (Mironov 2017, Prop. 1):

    ε_Q(α) = α·μ_r²/2 + ε_RR(α; ε_s),

ε_RR the randomized-response curve above for the ε_s-DP score. Q has no finite order-∞ bound,
so λ̂ ranges over :data:`ORDERS` only, and there is no pure bound: the total is
rdp_to_dp(repeat_rdp(ε_Q), δ) (dp-accounting: ``RepeatAndSelectDpEvent`` of
``ComposedDpEvent([SelfComposedDpEvent(GaussianDpEvent(z), T), RandomizedResponseDpEvent])``).
:func:`gaussian_total` is increasing in μ_r; :func:`solve_gaussian_mu` finds the largest μ_r
with total ≤ ε (bisection, relative 1e−9, checked). The score's share is public: for small
ε_s the randomized-response curve is ≈ α·ε_s²/2, a Gaussian of GDP parameter ε_s, so a run is
≈ a Gaussian of μ_Q² = μ_r² + ε_s²; the score takes the fixed part
:data:`GAUSSIAN_SCORE_SHARE` = 1/5 of that squared budget: ε_s = √(1/5)·μ_Q with μ_Q the
largest run parameter without a score (:func:`solve_gaussian_mu` at ε_s = 0), then μ_r is
solved exactly with that ε_s (≈ 0.89·μ_Q). Why a fifth, and not the pure plan's 283/n: a
noisy GD fit's accuracy is nearly flat in its μ (benchmarks/RESULTS.md, noisy_gd), while the
score must tell apart candidates a fraction of a percent of the rows apart; on Adult at
ε = 1 the pure plan's ε_s = 283/n (count s.d. 0.5 % of the rows) chose λ = 1e-2, six points
worse, in a tenth of the selections, and a fifth of the squared budget (s.d. ≈ 0.09 %)
costs the runs 11 % of μ.
The run is then calibrated at a multiplier z_r ≥ √T/μ_r
(:func:`service.dp.mechanisms.noisy_gd.run_budget`) and the total is recomputed at the
actual μ = √T/z_r ≤ μ_r: that is what the plan records and what the ledger's total covers.

**What is released, and what is not.** The chosen model and its candidate (Q's outputs). K —
the realised number of runs — is **not** released and is not in the record or the job's progress:
Thm 2 bounds the release of the best output only; for a K that were known, A would be a best of
K fixed runs, for which the bound above does not hold. The job's running time grows with K
(docs/privacy.md, "Private selection: the number of runs"). The law's parameters (η, γ, μ) are
public and shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal, localcontext
from fractions import Fraction
from functools import lru_cache
from typing import Any, Final, Generic, TypeVar

import numpy as np

from service.dp.analysis.task_scores import error_score, score_sensitivity
from service.dp.core.accounting import largest_share, remainder_within, round_up
from service.dp.core.base import FitResult
from service.dp.data.prepared import PreparedDesign
from service.dp.noise.discrete import bernoulli, discrete_laplace, randbelow

__all__ = [
    "ORDERS",
    "RepetitionLaw",
    "RepetitionPlan",
    "RepetitionResult",
    "gaussian_run_rdp",
    "gaussian_total",
    "pure_dp_rdp",
    "rdp_to_dp",
    "repeat_and_select",
    "repeat_rdp",
    "solve_budget",
    "solve_gaussian_mu",
    "total_epsilon",
]

#: Rényi orders tried by the accounting (the grid of dp-accounting's RDP accountant).
ORDERS: Final[tuple[float, ...]] = tuple(
    [1 + x / 10.0 for x in range(1, 100)]
    + [float(v) for v in range(11, 64)]
    + [128.0, 256.0, 512.0, 1024.0]
)

C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class RepetitionLaw:
    """The truncated negative binomial law D_{η,γ} of the number of runs (module docstring);
    η = 1 is the geometric law of Liu & Talwar, η = 0 the logarithmic law."""

    eta: float
    gamma: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.eta) and 0.0 <= self.eta <= 1.0):
            raise ValueError("η must lie in [0, 1]")
        if not (math.isfinite(self.gamma) and 0.0 < self.gamma < 1.0):
            raise ValueError("γ must lie in (0, 1)")

    @property
    def mean(self) -> float:
        """μ = E[K]."""
        eta, gamma = self.eta, self.gamma
        if eta == 0.0:
            return (1.0 / gamma - 1.0) / math.log(1.0 / gamma)
        return eta * (1.0 - gamma) / (gamma * -math.expm1(eta * math.log(gamma)))

    def log_pmf(self, k: int) -> float:
        """ln P[K = k] (k ≥ 1), from the closed form."""
        if k < 1:
            return -math.inf
        eta, gamma = self.eta, self.gamma
        head = k * math.log1p(-gamma)
        if eta == 0.0:
            return head - math.log(k) - math.log(math.log(1.0 / gamma))
        log_c = math.lgamma(k + eta) - math.lgamma(eta) - math.lgamma(k + 1)
        return head + log_c - math.log(math.expm1(-eta * math.log(gamma)))

    def pmf(self, k: int) -> float:
        return math.exp(self.log_pmf(k))

    def generating_function(self, s: float) -> float:
        """G(s) = E[s^K] for s ∈ [0, 1]."""
        eta, gamma = self.eta, self.gamma
        x = 1.0 - (1.0 - gamma) * s
        if eta == 0.0:
            return math.log(x) / math.log(gamma)
        return math.expm1(-eta * math.log(x)) / math.expm1(-eta * math.log(gamma))

    def miss_probability(self, k: int) -> float:
        """P[a given one of k uniformly drawn candidates is never tried] = G(1 − 1/k)."""
        return self.generating_function(1.0 - 1.0 / k)

    def sample(self, rng: np.random.Generator | None) -> int:
        """One draw of K, exactly from the law (module docstring's rejection sampler)."""
        gamma = Fraction(self.gamma)
        eta = Fraction(self.eta)
        while True:
            j = 1
            while not bernoulli(gamma, rng):
                j += 1
            if eta == 1 or all(bernoulli((ell + eta) / (ell + 1), rng) for ell in range(1, j)):
                return j

    def to_dict(self) -> dict[str, Any]:
        name = {0.0: "logarithmic", 1.0: "geometric"}.get(self.eta, "truncated negative binomial")
        return {
            "law": name,
            "eta": self.eta,
            "gamma": self.gamma,
            "mean": self.mean,
            "pmf": "P[K = k] = (1 − γ)^k · Π_{l<k} (l + η)/(l + 1) / (γ^(−η) − 1), k ≥ 1"
            if self.eta > 0
            else "P[K = k] = (1 − γ)^k / (k · ln(1/γ)), k ≥ 1",
        }


def pure_dp_rdp(epsilon0: float, alpha: float) -> float:
    """The Rényi divergence of order α (≥ 1; ∞ allowed) of binary randomized response with odds
    e^{ε₀}: the largest of any ε₀-DP mechanism (module docstring)."""
    if epsilon0 == 0.0:
        return 0.0
    if math.isinf(alpha):
        return epsilon0
    if alpha == 1.0:  # KL: ε₀·tanh(ε₀/2)
        return epsilon0 * math.tanh(epsilon0 / 2.0)
    value = epsilon0 + (
        math.log1p(math.exp((1.0 - 2.0 * alpha) * epsilon0)) - math.log1p(math.exp(-epsilon0))
    ) / (alpha - 1.0)
    return min(max(value, 0.0), epsilon0)


def repeat_rdp(
    base: Sequence[float],
    law: RepetitionLaw,
    orders: Sequence[float] = ORDERS,
    *,
    base_at_infinity: float | None = None,
) -> list[float]:
    """PS22 Thm 2: the RDP of A at each order from Q's RDP ``base`` at the same orders (and,
    when given, Q's RDP at order ∞, e.g. ε₀ for an ε₀-DP Q), made non-decreasing in the order."""
    if len(base) != len(orders):
        raise ValueError("one RDP value per order")
    eta, gamma = law.eta, law.gamma
    log_inv_gamma = -math.log(gamma)
    hat = [(1.0 - 1.0 / a) * r + log_inv_gamma / a for a, r in zip(orders, base, strict=True)]
    if base_at_infinity is not None:
        hat.append(base_at_infinity)
    constant = (1.0 + eta) * min(hat)
    log_mean = math.log(law.mean)
    raw = [
        r + constant + log_mean / (a - 1.0) if a > 1.0 else math.inf
        for a, r in zip(orders, base, strict=True)
    ]
    # monotonicity: the RDP at order λ is at most that at any higher order
    out = list(raw)
    running = math.inf
    for index in sorted(range(len(orders)), key=lambda i: -orders[i]):
        running = min(running, raw[index])
        out[index] = running
    return out


def rdp_to_dp(orders: Sequence[float], rdp: Sequence[float], delta: float) -> float:
    """ε at δ > 0 from RDP: min_λ ε(λ) + ln(1 − 1/λ) − (ln δ + ln λ)/(λ − 1) (CKS20 Prop. 12),
    over orders > 1.01 (the numerically stable range, as in dp-accounting)."""
    if not 0.0 < delta < 1.0:
        raise ValueError("the conversion needs 0 < δ < 1")
    best = math.inf
    for a, r in zip(orders, rdp, strict=True):
        if a > 1.01 and math.isfinite(r):
            best = min(best, r + math.log1p(-1.0 / a) - math.log(delta * a) / (a - 1.0))
    return max(0.0, best)


def total_epsilon(epsilon0: float, law: RepetitionLaw, delta: float) -> tuple[float, str]:
    """The (ε, δ) guarantee of A for an ε₀-DP Q: the pure bound (2 + η)ε₀ and, when δ > 0, the
    RDP conversion; the smaller and which one it is (``"pure"`` or ``"rdp"``). Both are upper
    bounds in real arithmetic for the doubles given, rounded up: (2 + η)ε₀ exactly, the RDP
    chain in decimals (:func:`_rdp_upper`), so a charged total is never understated."""
    pure = round_up((2 + Fraction(law.eta)) * Fraction(epsilon0))
    if delta <= 0.0 or _total_estimate(epsilon0, law, delta) >= pure:
        return pure, "pure"
    rdp = round_up(_rdp_upper(epsilon0, law, delta))
    return (rdp, "rdp") if rdp < pure else (pure, "pure")


def _total_estimate(epsilon0: float, law: RepetitionLaw, delta: float) -> float:
    """:func:`total_epsilon` in doubles (a search aid: it may lie an ulp or so below)."""
    pure = (2.0 + law.eta) * epsilon0
    if delta <= 0.0:
        return pure
    base = [pure_dp_rdp(epsilon0, a) for a in ORDERS]
    return min(pure, rdp_to_dp(ORDERS, repeat_rdp(base, law, base_at_infinity=epsilon0), delta))


@lru_cache(maxsize=4096)
def _rdp_upper(
    epsilon0: float, law: RepetitionLaw, delta: float, *, mu: float | None = None
) -> Fraction:
    """A rational ≥ the RDP route of :func:`total_epsilon` (module docstring, "Accounting"),
    for the doubles ε₀, η, γ, δ and the orders of :data:`ORDERS` (each a valid Rényi order);
    with ``mu`` given, that of :func:`gaussian_total` instead (Q's RDP α·μ²/2 + ε_RR(α; ε₀),
    no order-∞ term; S then also counts 10³·μ²). Memoised: a pure function of public doubles.

    The route is a minimum over three choices of order: λ̂ (Thm 2's inner order, or ∞), the
    order j whose bound ε_A(λ_j) bounds the RDP at λ ≤ λ_j (monotonicity), and the conversion's
    order λ. Each choice gives a valid upper bound, so any subset of choices bounds too. A pass
    in doubles (:func:`_candidate_orders`) keeps the choices within 10⁻⁹·(1 + |value|) of its
    minimum — far above the doubles' error, so the decimals' minimiser is among them and the
    value is the one over all of :data:`ORDERS` — and only those are proved:
    every step in 80-digit decimals (each operation correctly rounded, ≤ 10⁻⁷⁹ relative; no
    intermediate exceeds 10⁴·S in size, S = 1 + ε₀ + ln(1/γ) + ln(1/δ), and 1 − γ^η is
    summed as a series where it would cancel), rounded outward by 10⁻⁴⁰·S, far above the
    accumulated error. Minima of upper bounds bound the minima."""
    hats, pairs = _candidate_orders(epsilon0, law, delta, mu)
    # every operation, the operators included, in 80 digits
    with localcontext(Context(prec=80)) as ctx:
        e0, eta, gamma = Decimal(epsilon0), Decimal(law.eta), Decimal(law.gamma)
        log_inv_gamma, log_delta = -ctx.ln(gamma), ctx.ln(Decimal(delta))
        half_mu2 = Decimal(mu or 0.0) * Decimal(mu or 0.0) / 2
        slack = (1 + e0 + log_inv_gamma - log_delta + 2048 * half_mu2) / Decimal(10) ** 40

        def up(value: Decimal) -> Decimal:
            return ctx.add(value, slack)

        log_den = ctx.ln(ctx.add(1, ctx.exp(-e0)))
        base: dict[int, Decimal] = {}

        def base_at(index: int) -> Decimal:
            if index not in base:
                a = Decimal(ORDERS[index])
                num = ctx.ln(ctx.add(1, ctx.exp(ctx.multiply(ctx.subtract(1, 2 * a), e0))))
                value = up(ctx.add(e0, ctx.divide(ctx.subtract(num, log_den), ctx.subtract(a, 1))))
                base[index] = min(max(value, Decimal(0)), e0) + a * half_mu2
            return base[index]

        hat = [
            up(
                ctx.add(
                    ctx.multiply(1 - 1 / Decimal(ORDERS[i]), base_at(i)),
                    ctx.divide(log_inv_gamma, Decimal(ORDERS[i])),
                )
            )
            for i in hats
        ]
        constant = up(ctx.multiply(1 + eta, min([*hat, e0] if mu is None else hat)))
        if law.eta == 0.0:
            mean = ctx.divide(ctx.subtract(ctx.divide(1, gamma), 1), log_inv_gamma)
        else:
            mean = ctx.divide(
                ctx.multiply(eta, 1 - gamma),
                ctx.multiply(gamma, _one_minus_exp(ctx, -eta * log_inv_gamma)),
            )
        log_mean = up(ctx.ln(mean))
        raw: dict[int, Decimal] = {}
        for j in {j for _, js in pairs for j in js}:
            a = Decimal(ORDERS[j])
            raw[j] = up(ctx.add(ctx.add(base_at(j), constant), ctx.divide(log_mean, a - 1)))
        best: Decimal | None = None
        for i, js in pairs:
            running = min(raw[j] for j in js)
            a = Decimal(ORDERS[i])
            tail = ctx.divide(ctx.add(log_delta, ctx.ln(a)), a - 1)
            value = up(ctx.subtract(ctx.add(running, ctx.ln(ctx.divide(a - 1, a))), tail))
            best = value if best is None else min(best, value)
        assert best is not None  # ORDERS has orders > 1.01
        return Fraction(max(best, Decimal(0)))


#: How far above the doubles' minimum a choice of orders is still proved in decimals (the
#: doubles' error is ~10⁻¹³ relative at most; any subset of choices is a valid bound).
_CANDIDATE_MARGIN: Final[float] = 1e-9


def _candidate_orders(
    epsilon0: float, law: RepetitionLaw, delta: float, mu: float | None
) -> tuple[list[int], list[tuple[int, list[int]]]]:
    """The doubles pass of :func:`_rdp_upper`: the indices λ̂ into :data:`ORDERS` whose Thm 2
    bracket is within the margin of the smallest (order ∞ is always kept for a pure run), and
    the pairs (λ, orders λ_j ≥ λ) whose conversion ε_A(λ_j) + ln(1 − 1/λ) − (ln δ + ln λ)/(λ − 1)
    is within the margin of the smallest, λ > 1.01."""
    half_mu2 = (mu or 0.0) * (mu or 0.0) / 2.0
    base = [pure_dp_rdp(epsilon0, a) + a * half_mu2 for a in ORDERS]
    log_inv_gamma = -math.log(law.gamma)
    hat = [(1.0 - 1.0 / a) * r + log_inv_gamma / a for a, r in zip(ORDERS, base, strict=True)]
    lowest = min(hat) if mu is not None else min(*hat, epsilon0)
    hats = [i for i, h in enumerate(hat) if h <= lowest + _CANDIDATE_MARGIN * (1.0 + abs(h))]
    constant = (1.0 + law.eta) * lowest
    log_mean = math.log(law.mean)
    raw = [r + constant + log_mean / (a - 1.0) for a, r in zip(ORDERS, base, strict=True)]
    conv = {
        i: math.log1p(-1.0 / a) - math.log(delta * a) / (a - 1.0)
        for i, a in enumerate(ORDERS)
        if a > 1.01
    }
    by_order = sorted(range(len(ORDERS)), key=lambda i: ORDERS[i])
    suffix_min = [math.inf] * len(ORDERS)
    running = math.inf
    for i in reversed(by_order):
        running = min(running, raw[i])
        suffix_min[i] = running
    best = min(suffix_min[i] + c for i, c in conv.items())
    pairs = []
    for i, c in conv.items():
        limit = best - c + _CANDIDATE_MARGIN * (1.0 + abs(best))
        if suffix_min[i] <= limit:
            js = [j for j in range(len(ORDERS)) if ORDERS[j] >= ORDERS[i] and raw[j] <= limit]
            pairs.append((i, js))
    return hats, pairs


def _one_minus_exp(ctx: Context, x: Decimal) -> Decimal:
    """1 − e^x for x ≤ 0, by its series −x − x²/2 − … where e^x is near 1 (no cancellation)."""
    if x < Decimal("-0.001"):
        return ctx.subtract(1, ctx.exp(x))
    total, term, k = Decimal(0), -x, 1
    while term != 0 and abs(term) > abs(x) * Decimal(10) ** -90:
        total = ctx.add(total, term)
        k += 1
        term = ctx.divide(ctx.multiply(term, x), k)
    return total


def gaussian_run_rdp(
    mu: float, score_epsilon: float, orders: Sequence[float] = ORDERS
) -> list[float]:
    """ε_Q(α) = α·μ²/2 + ε_RR(α; ε_s): a run of μ-GDP Gaussian releases (RDP α·μ²/2) and the
    ε_s-DP noisy score, composed (module docstring)."""
    return [a * mu * mu / 2.0 + pure_dp_rdp(score_epsilon, a) for a in orders]


def gaussian_total(mu: float, score_epsilon: float, law: RepetitionLaw, delta: float) -> float:
    """ε at δ of A over Gaussian runs of GDP parameter μ scored at ε_s (Thm 2 on RDP, then the
    CKS conversion; no order-∞ term), as an upper bound in real arithmetic for the doubles
    given (:func:`_rdp_upper`), rounded up."""
    return round_up(_rdp_upper(score_epsilon, law, delta, mu=mu))


def _gaussian_estimate(mu: float, score_epsilon: float, law: RepetitionLaw, delta: float) -> float:
    """:func:`gaussian_total` in doubles (a search aid: it may lie an ulp or so below)."""
    return rdp_to_dp(ORDERS, repeat_rdp(gaussian_run_rdp(mu, score_epsilon), law), delta)


@lru_cache(maxsize=1024)
def solve_gaussian_mu(
    epsilon: float, delta: float, law: RepetitionLaw, score_epsilon: float
) -> float:
    """The largest μ (to a relative 1e−9) with :func:`gaussian_total` ≤ ε; ValueError when the
    score alone (μ → 0) already exceeds ε. Memoised: a pure function of public doubles."""
    if not (math.isfinite(epsilon) and epsilon > 0 and 0.0 < delta < 1.0):
        raise ValueError("Gaussian runs need a finite ε > 0 and 0 < δ < 1")
    low = 0.0
    if gaussian_total(low, score_epsilon, law, delta) >= epsilon:
        raise ValueError("the score's share alone exceeds ε")
    high = 1.0
    while _gaussian_estimate(high, score_epsilon, law, delta) <= epsilon:
        low, high = high, 2.0 * high
    while high - low > 1e-9 * high:
        mid = 0.5 * (low + high)
        if _gaussian_estimate(mid, score_epsilon, law, delta) <= epsilon:
            low = mid
        else:
            high = mid
    # the doubles searched; the proved total decides (relative steps 10⁻¹², doubling)
    step = 1e-12
    while low > 0.0 and gaussian_total(low, score_epsilon, law, delta) > epsilon:
        low *= 1.0 - step
        step = min(2.0 * step, 1e-3)
    if low <= 0.0:
        raise ValueError("no positive μ fits in ε")
    return low


def _pure_share(epsilon: float, eta: float) -> float:
    """The largest double ε₀ with (2 + η)·ε₀ ≤ ε in exact arithmetic."""
    return largest_share(epsilon / (2.0 + eta), 2 + Fraction(eta), epsilon)


@lru_cache(maxsize=1024)
def solve_budget(epsilon: float, delta: float, law: RepetitionLaw) -> float:
    """The per-repetition pure budget ε₀: the largest (to a relative 1e−9) with
    :func:`total_epsilon` ≤ ε. Memoised: a pure function of public doubles."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("ε must be finite and > 0")
    low = _pure_share(epsilon, law.eta)
    if delta <= 0.0:
        return low
    high = epsilon * 4.0
    pure_share = low
    if total_epsilon(low, law, delta)[0] > epsilon:  # cannot happen: the pure bound is ≤ ε
        raise AssertionError("the pure bound exceeds ε")
    while high - low > 1e-9 * low:
        mid = (low + high) / 2.0
        if _total_estimate(mid, law, delta) <= epsilon:
            low = mid
        else:
            high = mid
    # the doubles searched; the proved total decides (relative steps 10⁻¹², doubling)
    step = 1e-12
    while low > pure_share and total_epsilon(low, law, delta)[0] > epsilon:
        low = max(pure_share, low * (1.0 - step))
        step = min(2.0 * step, 1e-3)
    return low


#: The scoring's share of ε₀: enough that the noisy error count's standard deviation (√2/ε_s)
#: is about 0.5 % of the rows (ε_s = SCORE_ROWS/n), within [MIN_SCORE_SHARE, MAX_SCORE_SHARE].
SCORE_ROWS: Final[float] = 283.0
MIN_SCORE_SHARE: Final[float] = 0.02
MAX_SCORE_SHARE: Final[float] = 0.5


#: Gaussian runs: the score's part of the run's squared GDP budget (module docstring).
GAUSSIAN_SCORE_SHARE: Final[float] = 0.2


def score_share(n: int, epsilon0: float) -> float:
    """f, the part of ε₀ spent on the noisy error count: clamp(SCORE_ROWS/(n·ε₀))."""
    return min(MAX_SCORE_SHARE, max(MIN_SCORE_SHARE, SCORE_ROWS / (n * epsilon0)))


@dataclass(frozen=True, slots=True)
class RepetitionPlan:
    """The public plan of a random-repetition selection: the method, the law of K, the
    per-repetition budget ε₀ = ε_t + ε_s and the accounting."""

    method: str
    law: RepetitionLaw
    epsilon: float
    delta: float
    epsilon0: float
    train_epsilon: float
    score_epsilon: float
    accounted_epsilon: float
    accounting: str
    #: ``"pure"`` (runs at (ε_t, 0)) or ``"gaussian"`` (runs of GDP parameter ``fit_mu``, called
    #: at (ε_t, fit_delta) with T = ``fit_iterations`` and multiplier ``fit_multiplier``).
    base: str = "pure"
    fit_delta: float = 0.0
    fit_mu: float = 0.0
    fit_iterations: int = 0
    fit_multiplier: float = 0.0

    @classmethod
    def build_gaussian(
        cls,
        method: str,
        law: RepetitionLaw,
        *,
        n: int,
        epsilon: float,
        delta: float,
        calibrate: Callable[[float], tuple[float, float, int, float]],
    ) -> RepetitionPlan:
        """The plan for Gaussian runs (module docstring): ε_s = √(1/5)·μ_Q, μ_r solved,
        then ``calibrate(μ_r)`` → the run's (ε_t, δ_t, T, z_r) with √T/z_r ≤ μ_r; the total is
        recomputed at the actual μ and must be ≤ ε."""
        del n  # the share is of the run's budget, not of the rows
        score = math.sqrt(GAUSSIAN_SCORE_SHARE) * solve_gaussian_mu(epsilon, delta, law, 0.0)
        mu_r = solve_gaussian_mu(epsilon, delta, law, score)
        fit_epsilon, fit_delta, iterations, multiplier = calibrate(mu_r)
        mu = math.sqrt(iterations) / multiplier
        total = gaussian_total(mu, score, law, delta)
        if not (mu <= mu_r and total <= epsilon):
            raise AssertionError("the calibrated run exceeds the solved μ")
        return cls(
            method=method,
            law=law,
            epsilon=epsilon,
            delta=delta,
            epsilon0=math.nan,
            train_epsilon=fit_epsilon,
            score_epsilon=score,
            accounted_epsilon=total,
            accounting="rdp",
            base="gaussian",
            fit_delta=fit_delta,
            fit_mu=mu,
            fit_iterations=iterations,
            fit_multiplier=multiplier,
        )

    @classmethod
    def build(
        cls, method: str, law: RepetitionLaw, *, n: int, epsilon: float, delta: float
    ) -> RepetitionPlan:
        epsilon0 = solve_budget(epsilon, delta, law)
        share = score_share(n, epsilon0)
        score = epsilon0 * share
        train = remainder_within(epsilon0, score)
        total, how = total_epsilon(epsilon0, law, delta)
        return cls(
            method=method,
            law=law,
            epsilon=epsilon,
            delta=delta,
            epsilon0=epsilon0,
            train_epsilon=train,
            score_epsilon=score,
            accounted_epsilon=total,
            accounting=how,
        )

    def record(self) -> dict[str, Any]:
        method = {
            "liu_talwar": "Liu and Talwar 2019 random stopping (geometric number of runs)",
            "papernot_steinke": "Papernot and Steinke 2022 (truncated negative binomial number "
            "of runs)",
        }.get(self.method, self.method)
        return {
            "method": method,
            "selection": self.method,
            "repetitions": self.law.to_dict()
            | {
                "released": False,
                "why": "only the best run is released; the realised number of runs is not (the "
                "accounting, PS22 Thm 2, covers the best output only)",
            },
            "per_repetition": self._per_repetition(),
            "accounting": self._accounting(),
        }

    def _per_repetition(self) -> dict[str, Any]:
        common = {
            "score_epsilon": self.score_epsilon,
            "score": "training-set error count + discrete Laplace of scale 1/score_epsilon "
            "(sensitivity 1; for a numeric label Σ⌈64·(y − clip(wᵀx, −1, 1))²/4⌉, "
            "sensitivity 64, scale 64/score_epsilon)",
            "candidate": "uniform over the grid, fitted on all rows",
        }
        if self.base == "gaussian":
            return {
                "fit_epsilon": self.train_epsilon,
                "fit_delta": self.fit_delta,
                "fit_gdp_mu": self.fit_mu,
                "fit_iterations": self.fit_iterations,
                "fit_noise_multiplier": self.fit_multiplier,
                "fit_rdp": "α·T/(2z²) (T Gaussian releases, noise multiplier z)",
                **common,
            }
        return {
            "epsilon": self.epsilon0,
            "fit_epsilon": self.train_epsilon,
            "fit_delta": 0.0,
            **common,
        }

    def _accounting(self) -> dict[str, Any]:
        if self.base == "gaussian":
            return {
                "theorem": "Papernot and Steinke 2022 Thm 2 (RDP) on the run's Rényi curve "
                "α·T/(2z²) + the randomized-response curve of the ε_s-DP score, converted to "
                "(ε, δ) by Canonne, Kamath and Steinke 2020 Prop. 12",
                "used": "rdp",
                "epsilon": self.accounted_epsilon,
                "delta": self.delta,
                "requested_epsilon": self.epsilon,
                "requested_delta": self.delta,
            }
        return {
            "theorem": "Papernot and Steinke 2022 Thm 2 (RDP) with the randomized-response "
            "RDP of an ε₀-DP run; pure bound (2 + η)·ε₀",
            "pure_bound": (2.0 + self.law.eta) * self.epsilon0,
            "used": self.accounting,
            "epsilon": self.accounted_epsilon,
            "delta": self.delta if self.accounting == "rdp" else 0.0,
            "requested_epsilon": self.epsilon,
            "requested_delta": self.delta,
        }


@dataclass(frozen=True, slots=True)
class RepetitionResult(Generic[C]):
    """The released best run: its candidate and fit (the number of runs is not kept)."""

    chosen: int
    result: FitResult
    candidates: tuple[C, ...]
    plan: RepetitionPlan


_KEY_BITS = 62


def repeat_and_select(
    design: PreparedDesign,
    candidates: Sequence[C],
    *,
    plan: RepetitionPlan,
    fit_one: Callable[[PreparedDesign, C], FitResult],
    rng: np.random.Generator | None,
) -> RepetitionResult[C]:
    """A (module docstring). ``fit_one(design, candidate)`` must fit at (plan.train_epsilon, 0)
    on all rows. Only the best run is kept; K is a local variable."""
    k = len(candidates)
    if k < 1:
        raise ValueError("at least one candidate")
    runs = plan.law.sample(rng)
    sensitivity = score_sensitivity(design.task)
    scale = sensitivity / Fraction(plan.score_epsilon)  # Δ/b = ε_s exactly
    best: tuple[tuple[int, int, int, bytes], int, FitResult] | None = None
    for _ in range(runs):
        index = randbelow(k, rng)
        result = fit_one(design, candidates[index])
        errors = error_score(result.model, design.X, design.y, design.task)
        noisy = errors + discrete_laplace(scale, rng)
        key = (noisy, randbelow(2**_KEY_BITS, rng), index, _coefficient_bytes(result))
        if best is None or key < best[0]:
            best = (key, index, result)
    assert best is not None
    return RepetitionResult(chosen=best[1], result=best[2], candidates=tuple(candidates), plan=plan)


def _coefficient_bytes(result: FitResult) -> bytes:
    body = result.model.to_dict()
    return repr(sorted(body.items())).encode()
