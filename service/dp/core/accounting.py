"""Privacy costs and how they compose (docs/design.md §2, "Budgets").

Definitions used throughout (neighbours differ by replacing one record):

* (ε, δ)-DP: P[M(D) ∈ S] ≤ e^ε P[M(D′) ∈ S] + δ for all neighbours D, D′ and events S.
* ρ-zCDP (Bun & Steinke 2016): D_α(M(D) ‖ M(D′)) ≤ ρα for every Rényi order α > 1.

Rules provided, each with its guarantee:

* **basic (sequential) composition** — mechanisms with (ε_i, δ_i) run on the same data give
  (Σε_i, Σδ_i). This is what the budget ledger applies between jobs.
* **advanced composition** (Dwork, Rothblum & Vadhan 2010; Dwork & Roth Thm 3.20) — k
  adaptively chosen (ε, δ)-DP mechanisms are, for any δ′ > 0,
  (ε√(2k ln(1/δ′)) + kε(e^ε − 1), kδ + δ′)-DP.
* **zCDP for Gaussian steps** — adding N(0, σ²I) to a query of L2 sensitivity Δ is
  ρ-zCDP with ρ = Δ²/(2σ²); ρ's add under composition; ρ-zCDP implies
  (ρ + 2√(ρ ln(1/δ)), δ)-DP for every δ > 0 (Bun & Steinke Prop. 1.3), and the tighter
  (ε(δ), δ)-DP of Canonne, Kamath & Steinke 2020 (Prop. 12 / Cor. 13, the conversion
  via Rényi divergence of every order α > 1):
  ε(δ) = inf_{α>1} [ αρ + (ln(1/δ) + (α − 1) ln(1 − 1/α) − ln α)/(α − 1) ].
* **parallel composition** — mechanisms each run on one part of a partition of the records
  (disjoint datasets, or disjoint row sets inside one job) give (max ε_i, max δ_i) with
  respect to any one record, since a record's replacement touches one part only.

The ledger stores ε and δ as integers in fixed units (:func:`to_units`): charges are rounded
up and caps down, from the decimal representation of the float so that 0.1 is exactly
100 000 000 units of 1e-9 (docs/design.md §2: spending 0.1 ten times from 1.0 succeeds).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from decimal import Overflow as DecimalOverflow
from fractions import Fraction
from typing import Any, Literal

from service.dp.core.validation import PrivacyParameterError

__all__ = [
    "DELTA_UNITS_PER_ONE",
    "EPSILON_UNITS_PER_ONE",
    "CompositionChoice",
    "PrivacyCost",
    "advanced_composition",
    "advanced_upper",
    "basic_composition",
    "best_composition",
    "check_epsilon_delta",
    "from_units",
    "gaussian_zcdp",
    "largest_share",
    "ledger_amount",
    "ledger_floor",
    "parallel_composition",
    "remainder_within",
    "round_up",
    "shown_as_requested",
    "to_units",
    "zcdp_compose",
    "zcdp_to_dp",
    "zcdp_to_dp_cks",
]

#: Ledger units: ε in 1e-9, δ in 1e-15.
EPSILON_UNITS_PER_ONE = 10**9
DELTA_UNITS_PER_ONE = 10**15


def check_epsilon_delta(epsilon: float, delta: float = 0.0) -> None:
    """Raise ValueError (:class:`PrivacyParameterError`) unless ε is finite and > 0 and
    0 ≤ δ < 1."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float):
        raise PrivacyParameterError(f"epsilon must be a number, got {type(epsilon).__name__}")
    if isinstance(delta, bool) or not isinstance(delta, int | float):
        raise PrivacyParameterError(f"delta must be a number, got {type(delta).__name__}")
    if not math.isfinite(epsilon) or epsilon <= 0.0:
        raise PrivacyParameterError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not math.isfinite(delta) or not 0.0 <= delta < 1.0:
        raise PrivacyParameterError(f"delta must satisfy 0 ≤ delta < 1, got {delta!r}")


@dataclass(frozen=True, slots=True)
class PrivacyCost:
    """An (ε, δ) guarantee or charge: ε finite and ≥ 0, 0 ≤ δ ≤ 1.

    ``a + b`` is basic composition.
    """

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.epsilon) or self.epsilon < 0.0:
            raise ValueError(f"epsilon must be finite and ≥ 0, got {self.epsilon!r}")
        if not math.isfinite(self.delta) or not 0.0 <= self.delta <= 1.0:
            raise ValueError(f"delta must lie in [0, 1], got {self.delta!r}")

    def __add__(self, other: PrivacyCost) -> PrivacyCost:
        return PrivacyCost(self.epsilon + other.epsilon, min(1.0, self.delta + other.delta))

    def __str__(self) -> str:
        if self.delta == 0.0:
            return f"ε = {self.epsilon:g}"
        return f"(ε = {self.epsilon:g}, δ = {self.delta:g})"


def basic_composition(costs: Iterable[PrivacyCost]) -> PrivacyCost:
    """Sequential composition: (Σε_i, Σδ_i), δ capped at 1. An empty sequence costs (0, 0)."""
    total = PrivacyCost(0.0, 0.0)
    for cost in costs:
        total = total + cost
    return total


def parallel_composition(costs: Iterable[PrivacyCost]) -> PrivacyCost:
    """Mechanisms on disjoint parts of the records: (max ε_i, max δ_i)."""
    items = list(costs)
    if not items:
        return PrivacyCost(0.0, 0.0)
    return PrivacyCost(max(c.epsilon for c in items), max(c.delta for c in items))


def advanced_composition(cost: PrivacyCost, k: int, delta_prime: float) -> PrivacyCost:
    """k-fold adaptive composition of an (ε, δ)-DP mechanism (Dwork–Rothblum–Vadhan):
    (ε√(2k ln(1/δ′)) + kε(e^ε − 1), kδ + δ′), for a caller-chosen 0 < δ′ < 1.

    Both parts are upper bounds in real arithmetic for the doubles given, as a charge must be:
    ε is :func:`advanced_upper` and δ the exact kδ + δ′ (capped at 1), each rounded up to a
    double. OverflowError when the ε bound exceeds the largest double."""
    _check_k(k)
    if not math.isfinite(delta_prime) or not 0.0 < delta_prime < 1.0:
        raise ValueError(f"delta_prime must satisfy 0 < delta_prime < 1, got {delta_prime!r}")
    eps_total = round_up(advanced_upper(cost.epsilon, k, delta_prime))
    delta_total = round_up(min(Fraction(1), k * Fraction(cost.delta) + Fraction(delta_prime)))
    return PrivacyCost(eps_total, delta_total)


def advanced_upper(epsilon: float, k: int, delta_prime: float) -> Fraction:
    """A rational ≥ the advanced-composition ε (Dwork, Rothblum & Vadhan 2010)
    ε√(2k ln(1/δ′)) + kε(e^ε − 1) of k steps of ε-DP, in real arithmetic for the doubles
    given. Evaluated in 60-digit decimals, where ln, √ and exp are correctly rounded: each of
    the ≤ 8 roundings is ≤ 10⁻⁵⁹ relative, and e^ε − 1 loses at most e^ε·10⁻⁵⁹ absolute to
    the cancellation; so the value plus 10⁻⁴⁰ relative and k·ε·max(2, ⌈e^ε⌉)·10⁻⁵⁰ absolute
    is an upper bound (for ε < ln 2, where DP-SGD searches, the factor is 2)."""
    ctx = Context(prec=60)
    s = Decimal(epsilon)
    root = ctx.sqrt(ctx.multiply(2 * k, ctx.ln(ctx.divide(1, Decimal(delta_prime)))))
    try:
        grown = ctx.exp(s)
    except DecimalOverflow as exc:
        raise OverflowError("e^ε exceeds the decimal range") from exc
    growth = ctx.subtract(grown, 1)
    value = ctx.add(ctx.multiply(s, root), ctx.multiply(ctx.multiply(k, s), growth))
    factor = max(2, math.ceil(Fraction(grown)))
    margin = Fraction(value) / 10**40 + Fraction(factor * k) * Fraction(epsilon) / 10**50
    return Fraction(value) + margin


def largest_share(start: float, factor: Fraction | int, epsilon: float) -> float:
    """``start`` (the caller's fl(ε/m)) stepped down one ulp at a time until m·share ≤ ε holds
    in exact arithmetic, m = ``factor`` > 0: m parts of this size never exceed ε."""
    share, m, target = start, Fraction(factor), Fraction(epsilon)
    while share > 0.0 and Fraction(share) * m > target:
        share = math.nextafter(share, 0.0)
    return share


def remainder_within(epsilon: float, used: float) -> float:
    """The budget left for the other part when ``used`` of ε is taken: fl(ε − used) stepped
    down one ulp at a time until remainder + used ≤ ε in exact arithmetic; ≤ 0 when nothing
    is left (the callers refuse then)."""
    rest, spent, target = epsilon - used, Fraction(used), Fraction(epsilon)
    while rest > 0.0 and Fraction(rest) + spent > target:
        rest = math.nextafter(rest, 0.0)
    return rest


def round_up(value: Fraction) -> float:
    """The smallest double ≥ ``value`` (OverflowError beyond the largest double)."""
    out = float(value)
    if Fraction(out) < value:
        out = math.nextafter(out, math.inf)
    if math.isinf(out):
        raise OverflowError("the value exceeds the largest double")
    return out


@dataclass(frozen=True, slots=True)
class CompositionChoice:
    """Both bounds for k-fold composition and the one chosen (``method``)."""

    basic: PrivacyCost
    advanced: PrivacyCost
    method: Literal["basic", "advanced"]

    @property
    def best(self) -> PrivacyCost:
        return self.basic if self.method == "basic" else self.advanced

    def describe(self, k: int) -> str:
        other = "advanced" if self.method == "basic" else "basic"
        other_cost = self.advanced if self.method == "basic" else self.basic
        return (
            f"{k}-fold composition: {self.method} composition gives {self.best}; "
            f"{other} composition would give {other_cost}"
        )


def best_composition(cost: PrivacyCost, k: int, delta_prime: float) -> CompositionChoice:
    """Basic and advanced k-fold composition side by side; advanced is chosen only when its ε
    is strictly smaller (it always costs δ′ more δ, which the caller agreed to by choosing δ′).
    Both are upper bounds: basic is the exact (kε, kδ) rounded up, advanced as in
    :func:`advanced_composition`."""
    _check_k(k)
    basic = PrivacyCost(
        round_up(k * Fraction(cost.epsilon)),
        round_up(min(Fraction(1), k * Fraction(cost.delta))),
    )
    advanced = advanced_composition(cost, k, delta_prime)
    method: Literal["basic", "advanced"] = (
        "advanced" if advanced.epsilon < basic.epsilon else "basic"
    )
    return CompositionChoice(basic=basic, advanced=advanced, method=method)


def gaussian_zcdp(sensitivity: float, sigma: float) -> float:
    """ρ of the Gaussian mechanism N(0, σ²I) on a query of L2 sensitivity Δ: ρ = Δ²/(2σ²),
    the exact quotient of the doubles given rounded up (a cost is never understated)."""
    for name, value in (("sensitivity", sensitivity), ("sigma", sigma)):
        if not math.isfinite(value) or value <= 0.0:
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return round_up(Fraction(sensitivity) ** 2 / (2 * Fraction(sigma) ** 2))


def zcdp_compose(rhos: Iterable[float]) -> float:
    """zCDP composes additively: Σρ_i, summed exactly and rounded up."""
    total = Fraction(0)
    for rho in rhos:
        if not math.isfinite(rho) or rho < 0.0:
            raise ValueError(f"every rho must be finite and ≥ 0, got {rho!r}")
        total += Fraction(rho)
    return round_up(total)


def zcdp_to_dp(rho: float, delta: float) -> PrivacyCost:
    """ρ-zCDP ⇒ (ρ + 2√(ρ ln(1/δ)), δ)-DP (Bun & Steinke 2016, Prop. 1.3); ε is an upper
    bound in real arithmetic for the doubles given (:func:`_bun_steinke_upper`), rounded up."""
    _check_rho_delta(rho, delta)
    return PrivacyCost(round_up(_bun_steinke_upper(rho, delta)), delta)


def _bun_steinke_upper(rho: float, delta: float) -> Fraction:
    """A rational ≥ ρ + 2√(ρ ln(1/δ)): 60-digit decimals (ln δ of the exact δ, √, products
    and the sum each correctly rounded, ≤ 10⁻⁵⁹ relative apiece, all terms ≥ 0), plus 10⁻⁴⁰
    relative."""
    ctx = Context(prec=60)
    root = ctx.sqrt(ctx.multiply(Decimal(rho), -ctx.ln(Decimal(delta))))
    value = Fraction(ctx.add(Decimal(rho), ctx.multiply(2, root)))
    return value + value / 10**40


def _cks_upper(rho: float, alpha: float, delta: float) -> Fraction:
    """A rational ≥ the Canonne–Kamath–Steinke ε at order α > 1 (a double):
    αρ + (ln(1/δ) + (α − 1) ln(1 − 1/α) − ln α)/(α − 1), in 60-digit decimals. Every
    operation is correctly rounded (≤ 10⁻⁵⁹ relative), so the error is below 10⁻⁵⁰ times
    the same expression with every term taken in absolute value and 1 + (α − 1) added to the
    numerator (the ln of a rounded argument errs by ≤ 10⁻⁵⁹ absolute), which is added.
    ln(1 − 1/α) is taken as ln((α − 1)/α), free of cancellation near α = 1."""
    ctx = Context(prec=60)
    a = Decimal(alpha)
    am1 = ctx.subtract(a, 1)
    log_inv = -ctx.ln(Decimal(delta))
    log_a = ctx.ln(a)
    shrink = ctx.multiply(am1, ctx.ln(ctx.divide(am1, a)))  # ≤ 0
    head = ctx.multiply(a, Decimal(rho))
    tail = ctx.divide(ctx.subtract(ctx.add(log_inv, shrink), log_a), am1)
    spread = ctx.add(ctx.add(ctx.add(log_inv, -shrink), abs(log_a)), ctx.add(1, am1))
    size = ctx.add(head, ctx.divide(spread, am1))
    return Fraction(ctx.add(head, tail)) + Fraction(size) / 10**50


def zcdp_to_dp_cks(rho: float, delta: float) -> PrivacyCost:
    """ρ-zCDP ⇒ (ε, δ)-DP with the conversion of Canonne, Kamath & Steinke 2020 (Cor. 13):

        ε = min_{α>1} αρ + (ln(1/δ) + (α − 1) ln(1 − 1/α) − ln α)/(α − 1).

    Every α gives a valid ε, so a numerically imperfect minimisation only loses tightness:
    the order is searched in doubles, then the ε at the α found (and at the starting guess)
    is bounded above in decimals (:func:`_cks_upper`) and rounded up, so the result is an
    upper bound in real arithmetic and never larger than :func:`zcdp_to_dp`'s.
    """
    _check_rho_delta(rho, delta)
    if rho == 0.0:
        return PrivacyCost(0.0, delta)
    log_inv_delta = math.log(1.0 / delta)

    def eps_at(log_am1: float) -> float:
        # parametrise α = 1 + e^t so that α > 1 throughout
        am1 = math.exp(log_am1)
        alpha = 1.0 + am1
        return alpha * rho + (log_inv_delta + am1 * math.log(am1 / alpha) - math.log(alpha)) / am1

    # The minimiser is near α ≈ 1 + √(ln(1/δ)/ρ); search a wide bracket around it in log space.
    centre = 0.5 * math.log(max(log_inv_delta, 1e-12) / rho)
    from scipy import optimize  # here, not at the top: processes that never solve skip it

    res = optimize.minimize_scalar(
        eps_at, bounds=(centre - 20.0, centre + 20.0), method="bounded", options={"xatol": 1e-10}
    )
    bounds = [_bun_steinke_upper(rho, delta)]
    for t in (float(res.x), centre):
        alpha = 1.0 + math.exp(t)
        if alpha > 1.0 and math.isfinite(alpha):
            bounds.append(_cks_upper(rho, alpha, delta))
    return PrivacyCost(round_up(max(min(bounds), Fraction(0))), delta)


def to_units(value: float, *, unit: Literal["epsilon", "delta"], rounding: str = "up") -> int:
    """An ε or δ as an integer number of ledger units (1e-9 ε, 1e-15 δ).

    The float's shortest decimal representation is scaled exactly, then rounded ``"up"``
    (charges: never under-charge) or ``"down"`` (caps: never over-grant).
    """
    if not math.isfinite(value) or value < 0.0:
        raise ValueError(f"{unit} must be finite and ≥ 0, got {value!r}")
    scale = EPSILON_UNITS_PER_ONE if unit == "epsilon" else DELTA_UNITS_PER_ONE
    if rounding not in ("up", "down"):
        raise ValueError(f"rounding must be 'up' or 'down', got {rounding!r}")
    mode = ROUND_CEILING if rounding == "up" else ROUND_FLOOR
    return int((Decimal(repr(float(value))) * scale).to_integral_value(rounding=mode))


def ledger_amount(value: float, *, unit: Literal["epsilon", "delta"]) -> float:
    """The largest double ≤ the amount the ledger charges for ``value`` (issue 19 §4).

    The ledger charges c = ⌈repr(value)/u⌉·u (:func:`to_units`, u = 1e-9 ε or 1e-15 δ): the
    decimal the caller wrote, rounded up to whole units, so ten charges of 0.1 make exactly
    1.0. The double 0.1 itself is 0.1000000000000000055…, *more* than it is charged for; a
    mechanism calibrated with it would spend 5.5e-18 more than the ledger records.
    Mechanisms are therefore calibrated with this value f = max{double x : x ≤ c} instead:
    f ≤ c exactly (compared in exact decimal arithmetic), so the charge is never less than
    what the mechanism uses, and f differs from ``value`` by at most one ulp (f = value
    whenever value ≤ c; otherwise value's predecessor, as c lies between repr and value).
    """
    units = to_units(value, unit=unit, rounding="up")
    scale = EPSILON_UNITS_PER_ONE if unit == "epsilon" else DELTA_UNITS_PER_ONE
    charged = Fraction(units, scale)
    out = float(charged)  # nearest double, possibly just above c
    if Fraction(out) > charged:
        out = math.nextafter(out, -math.inf)
    return out


def ledger_floor(value: float, *, unit: Literal["epsilon", "delta"] = "epsilon") -> float:
    """The amount a mechanism is calibrated with for a requested ``value``: the largest double
    ≤ both the request and what the ledger charges for it, min(value, :func:`ledger_amount`).

    Every path that draws noise for a charge calibrates with it: single fits and charged
    aggregations (:func:`service.dp.make_problem`), the federated protocols
    (:func:`service.dp.federated.calibrate_problem`), private evaluation and the exponential
    mechanism of private tuning, so none uses more than the ledger records. Non-finite values
    pass through unchanged for the callers' validation to refuse.
    """
    if not math.isfinite(value) or value < 0:
        return value
    return min(float(value), ledger_amount(float(value), unit=unit))


def shown_as_requested(
    details: Mapping[str, Any],
    *,
    epsilon: tuple[float, float],
    delta: tuple[float, float],
) -> dict[str, Any]:
    """``details`` with every ε (δ) figure equal to the calibrated floor shown as the request.

    ``epsilon`` and ``delta`` are ``(used, requested)``: a value under a key naming ε (δ),
    at any depth of nested mappings and lists, that equals the floor a mechanism was
    calibrated with (:func:`ledger_floor`) is reported as the request, which is what the
    ledger charges (conservative: the request is ≥ the floor); ``epsilon_calibrated`` and
    ``delta_calibrated`` record the floors themselves."""
    shown_epsilon = {epsilon[0]: epsilon[1]} if epsilon[0] != epsilon[1] else {}
    shown_delta = {delta[0]: delta[1]} if delta[0] != delta[1] else {}

    def walk(value: Any, key: str) -> Any:
        if isinstance(value, Mapping):
            return {k: walk(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if isinstance(value, float) and "epsilon" in key:
            return shown_epsilon.get(value, value)
        if isinstance(value, float) and "delta" in key:
            return shown_delta.get(value, value)
        return value

    out: dict[str, Any] = walk(details, "")
    out.update(epsilon_calibrated=epsilon[0], delta_calibrated=delta[0])
    return out


def from_units(units: int, *, unit: Literal["epsilon", "delta"]) -> float:
    """Inverse of :func:`to_units` (to the nearest float)."""
    scale = EPSILON_UNITS_PER_ONE if unit == "epsilon" else DELTA_UNITS_PER_ONE
    return float(Decimal(units) / Decimal(scale))


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")


def _check_rho_delta(rho: float, delta: float) -> None:
    if not math.isfinite(rho) or rho < 0.0:
        raise ValueError(f"rho must be finite and ≥ 0, got {rho!r}")
    if not math.isfinite(delta) or not 0.0 < delta < 1.0:
        raise ValueError(f"delta must satisfy 0 < delta < 1, got {delta!r}")
