"""Which private selection a tuned fit runs, and its public plan (issue 28 item 2).

:func:`choose_selection` is ``auto``'s rule between CMS private tuning
(:mod:`service.dp.analysis.selection`) and random repetition
(:mod:`service.dp.analysis.repetition`); :func:`repetition_law` and :func:`repetition_plan` give
the law of the number of runs K (E[K] = :func:`expected_runs`) and the per-run budget;
:func:`tuning_cost_factor` is the factor κ by which ``auto`` declines to tune in favour of the
automatic λ (rule 0). Pure numerics on public quantities only (k, n, d, ε, δ, the smallest λ,
the mechanism and its automatic λ): a choice releases nothing about the data and spends no
budget, so the quote and the record may show it with its reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from service.dp.analysis.repetition import RepetitionLaw, RepetitionPlan

__all__ = [
    "AUTOMATIC_LAMBDA",
    "GAUSSIAN_RUN_MECHANISMS",
    "MAX_COST_FACTOR",
    "REPETITION_SELECTIONS",
    "RULE_ONLY_MECHANISMS",
    "SELECTIONS",
    "SelectionChoice",
    "choose_selection",
    "expected_runs",
    "part_size",
    "repetition_law",
    "repetition_plan",
    "rule_cost_factor",
    "tuning_cost_factor",
]

#: The selection methods a tuned fit may ask for; ``auto`` applies :func:`choose_selection`.
SELECTIONS: Final[tuple[str, ...]] = ("auto", "cms", "papernot_steinke", "liu_talwar")
#: The random-repetition methods (:mod:`service.dp.analysis.repetition`).
REPETITION_SELECTIONS: Final[frozenset[str]] = frozenset({"papernot_steinke", "liu_talwar"})
#: η of each random-repetition method: PS22's truncated negative binomial at η = 1/2 (pure
#: cost 2.5·ε₀) and Liu–Talwar's geometric law, η = 1 (3·ε₀).
REPETITION_ETA: Final[dict[str, float]] = {"papernot_steinke": 0.5, "liu_talwar": 1.0}
#: The mean number of runs μ = clamp(RUNS_PER_CANDIDATE·k, MIN_RUNS, MAX_RUNS).
RUNS_PER_CANDIDATE: Final[float] = 6.0
MIN_RUNS: Final[float] = 10.0
MAX_RUNS: Final[float] = 40.0
#: ``auto`` uses PS22's η = ½ law while it misses a given candidate with probability at most
#: this (k ≤ 3 at μ = 6k), Liu–Talwar's geometric law (fewer misses, 3ε₀ instead of 2.5ε₀)
#: beyond: on Adult (benchmarks/RESULTS.md, bench_selection) the geometric law was 1.4 points
#: better at ε = 0.5 with k = 7 and within 0.3 points elsewhere.
MAX_MISS: Final[float] = 0.15
#: CMS is kept when its candidates are already nearly non-private: the noise proxy
#: 2d/(m·λ_min·ε) (the norm of output perturbation's noise on a part of m rows) at most this.
NEGLIGIBLE_NOISE: Final[float] = 0.01


#: ``auto``'s outcome when tuning is not expected to pay for itself: the automatic λ alone,
#: fitted at the whole budget (only when the caller gives it: ``rule_regularization``).
AUTOMATIC_LAMBDA: Final[str] = "automatic_lambda"
#: Mechanisms whose tuning cost :func:`tuning_cost_factor` measures with the excess-risk bound
#: of :mod:`service.dp.analysis.regularization` (objective-type noise of second moment m₂).
RULE_ONLY_MECHANISMS: Final[frozenset[str]] = frozenset(
    {"objective_perturbation", "generalized_objective_perturbation", "noisy_gd"}
)
#: ``auto`` tunes only while the bound's cost factor κ is at most this (see
#: :func:`tuning_cost_factor`): on the 54 synthetic calibration cells of
#: benchmarks/calibration/lambda_rule.json (ε ∈ {0.1, 0.5, 1}) κ ≥ 1.79 everywhere, and an
#: *oracle* choice of the best of λ ∈ {1e-4, …, 1e-1} with runs at ε/2 (ε/5 for ε = 0.5)
#: gained at most 0.38 points over the rule at ε, and over 0 in 5 cells (mean −3.0 points;
#: ``python -m benchmarks.calibrate_lambda --tuning-gain``).
MAX_COST_FACTOR: Final[float] = 1.5


def tuning_cost_factor(
    mechanism: str, *, n: int, d: int, epsilon: float, delta: float, plan: RepetitionPlan
) -> float:
    """κ = √(K_run/K_whole): how much larger the excess-risk bound's minimum is for the runs
    of random repetition than for one fit at the whole budget.

    Derivation. The bound of :mod:`service.dp.analysis.regularization` is
    f(λ) = (λ/2)R² + K/λ with K = 2A/n + m₂/n² (m₂ = E‖b‖² of the fit's noise); its minimum
    over λ is R√(2K), at λ* = √(2K)/R. If the true comparator norm is R′ = rR, the rule's λ*
    has f = R′√(2K)·(r + 1/r)/2, while a selection whose runs have K_run can at best (an
    oracle choice among its candidates) reach R′√(2K_run). Selection therefore improves the
    bound only when the rule is misspecified by (r + 1/r)/2 > κ; its runs pay κ whatever r.
    K_run uses the runs' noise: pure runs at (ε_t, 0) (m₂ of ε_t, e.g. 4d(d+1)/ε_t²);
    Gaussian runs of GDP parameter μ_r (``noisy_gd``, m₂ = 8d/μ_r²). Public: n, d, ε, δ, the
    plan, and the rule's constants A (R cancels)."""
    from service.dp.analysis.regularization import ESTIMATION_WEIGHT, noise_second_moment

    whole = noise_second_moment(mechanism, d=d, epsilon=epsilon, delta=delta)
    if plan.base == "gaussian":
        run = 8.0 * d / (plan.fit_mu * plan.fit_mu)
    else:
        pure = "objective_perturbation" if mechanism == "noisy_gd" else mechanism
        run = noise_second_moment(pure, d=d, epsilon=plan.train_epsilon, delta=0.0)
    estimation = 2.0 * ESTIMATION_WEIGHT / n
    return math.sqrt((estimation + run / n**2) / (estimation + whole / n**2))


def expected_runs(k: int) -> float:
    """μ, the mean number of runs for k candidates (public; :data:`RUNS_PER_CANDIDATE`)."""
    return min(MAX_RUNS, max(MIN_RUNS, RUNS_PER_CANDIDATE * k))


def repetition_law(method: str, k: int) -> RepetitionLaw:
    """The law of K for a random-repetition ``method`` and k candidates: η from
    :data:`REPETITION_ETA`, γ solved (bisection on the closed-form mean, decreasing in γ) so
    that E[K] = :func:`expected_runs` (k) to a relative 1e−9."""
    eta = REPETITION_ETA[method]
    target = expected_runs(k)
    if eta == 1.0:
        return RepetitionLaw(eta, 1.0 / target)
    low, high = 1e-12, 1.0 - 1e-12  # mean(low) > target > mean(high)
    while high - low > 1e-9 * low:
        mid = (low + high) / 2.0
        if RepetitionLaw(eta, mid).mean > target:
            low = mid
        else:
            high = mid
    return RepetitionLaw(eta, high)


#: Mechanisms whose runs random repetition accounts by their Rényi curve (Gaussian runs at
#: δ > 0) instead of a pure ε_t: ``noisy_gd`` (:func:`service.dp.mechanisms.noisy_gd.rdp_curve`).
GAUSSIAN_RUN_MECHANISMS: Final[frozenset[str]] = frozenset({"noisy_gd"})


def gaussian_run_iterations(n: int, d: int, mu: float, requested: int | None) -> int:
    """T of each ``noisy_gd`` run: the requested ``iterations``, else noisy_gd's public rule
    :func:`~service.dp.mechanisms.noisy_gd.default_iterations` at the run's GDP parameter μ."""
    from service.dp.mechanisms.noisy_gd import default_iterations

    return int(requested) if requested is not None else default_iterations(n, d, mu)


def repetition_plan(
    method: str,
    *,
    k: int,
    n: int,
    epsilon: float,
    delta: float,
    mechanism: str | None = None,
    d: int = 1,
    iterations: int | None = None,
) -> RepetitionPlan:
    """The full public plan (law, per-run budget, accounting) of a random-repetition method:
    pure runs at (ε_t, 0) with ε₀ = ε_t + ε_s, or, for a mechanism of
    :data:`GAUSSIAN_RUN_MECHANISMS`, Gaussian runs accounted by their Rényi curve (T from
    ``iterations`` or the mechanism's rule on n, d and the run's μ). ValueError when the request
    cannot be planned (e.g. δ = 0 for Gaussian runs)."""
    law = repetition_law(method, k)
    if mechanism in GAUSSIAN_RUN_MECHANISMS:
        from service.dp.mechanisms.noisy_gd import run_budget

        def calibrate(mu: float) -> tuple[float, float, int, float]:
            budget = run_budget(mu, delta, gaussian_run_iterations(n, d, mu, iterations))
            return budget.epsilon, budget.delta, budget.iterations, budget.multiplier

        return RepetitionPlan.build_gaussian(
            method, law, n=n, epsilon=epsilon, delta=delta, calibrate=calibrate
        )
    return RepetitionPlan.build(method, law, n=n, epsilon=epsilon, delta=delta)


def part_size(n: int, k: int) -> int:
    """The smallest part when n rows are split into k + 1 parts: ⌊n/(k+1)⌋."""
    return n // (k + 1)


@dataclass(frozen=True, slots=True)
class SelectionChoice:
    """The method chosen for a tuned fit and why (shown in quotes and records)."""

    method: str
    requested: str
    reason: str


def choose_selection(
    requested: str,
    *,
    k: int,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    min_regularization: float,
    repetition_possible: bool,
    mechanism: str | None = None,
    iterations: int | None = None,
    rule_regularization: float | None = None,
) -> SelectionChoice:
    """The selection method from public quantities only (k, n, d, ε, δ, the smallest λ, and
    whether the mechanism runs at δ = 0, which random repetition needs).

    ``auto``'s rule. Every candidate's noise scales, for output and objective perturbation, as
    1/(rows · ε of its fit) (noise norm 2d/(mλε)). CMS fits each candidate on m = ⌊n/(k+1)⌋ rows
    at ε; random repetition on n rows at ε_t (PS22 at η = ½: ε_t ≈ 0.4·ε less the score's share).

    1. CMS when random repetition cannot run (a mechanism that needs δ > 0).
    2. CMS when its candidates are already nearly non-private: 2d/(m·λ_min·ε) ≤
       :data:`NEGLIGIBLE_NOISE` (huge n). Then both methods release a near-exact model, and CMS
       tries every candidate surely, on a held-out part, for k fits of m rows instead of about
       μ fits of n rows.
    3. Otherwise random repetition when its fits are at least as well calibrated as CMS's,
       n·ε_t ≥ m·ε (k ≥ 2 in practice), else CMS (a single candidate). Its law: PS22's η = ½
       when it misses a given candidate with probability G(1 − 1/k) ≤ :data:`MAX_MISS`, else
       Liu–Talwar's geometric law.

    Gaussian runs (``mechanism`` in :data:`GAUSSIAN_RUN_MECHANISMS`, δ > 0): noisy GD's noise
    in the mean gradient is σ/rows ∝ 1/(rows·μ) (σ = 2√T/μ), and its λ does not scale the noise,
    so rule 2 does not apply; rule 3 compares n·μ_r (each run on all rows at the solved GDP
    parameter μ_r) with m·μ(ε, δ) (CMS: each candidate on m rows at the whole (ε, δ)).

    0. (Only when the caller gives the mechanism's automatic λ, ``rule_regularization``, for
       a mechanism of :data:`RULE_ONLY_MECHANISMS` that random repetition can run.) No
       selection, :data:`AUTOMATIC_LAMBDA`, when the runs of the random-repetition method
       rule 3 would pick cost the excess-risk bound a factor κ > :data:`MAX_COST_FACTOR`
       (:func:`tuning_cost_factor`): the automatic λ is then fitted on all rows at the whole
       budget. CMS is not weighed: its parts of n/(k + 1) rows cost the bound at least
       √(k + 1) ≥ √2 at k ≥ 1 and κ ≥ k + 1 when noise dominates (both terms of K grow).
    """
    if requested not in SELECTIONS:
        raise ValueError(f"selection must be one of {', '.join(SELECTIONS)}")
    if requested != "auto":
        return SelectionChoice(requested, requested, "requested")
    m = part_size(n, k)
    if not repetition_possible:
        return SelectionChoice(
            "cms", requested, "the mechanism needs δ > 0: random repetition runs fits at δ = 0"
        )
    if rule_regularization is not None and mechanism in RULE_ONLY_MECHANISMS:
        declined = _rule_only(
            requested,
            k=k,
            n=n,
            d=d,
            epsilon=epsilon,
            delta=delta,
            mechanism=mechanism,
            iterations=iterations,
            rule_regularization=rule_regularization,
        )
        if declined is not None:
            return declined
    if mechanism in GAUSSIAN_RUN_MECHANISMS:
        return _choose_for_gaussian_runs(
            requested, k=k, n=n, d=d, epsilon=epsilon, delta=delta, iterations=iterations
        )
    proxy = 2.0 * d / (max(m, 1) * min_regularization * epsilon)
    if proxy <= NEGLIGIBLE_NOISE:
        return SelectionChoice(
            "cms",
            requested,
            f"CMS's fits are nearly non-private: 2d/(m·λ_min·ε) = {proxy:.3g} ≤ "
            f"{NEGLIGIBLE_NOISE:g} with m = {m}",
        )
    method, miss = _repetition_method(k)
    plan = repetition_plan(method, k=k, n=n, epsilon=epsilon, delta=delta)
    if n * plan.train_epsilon >= m * epsilon:
        return SelectionChoice(
            method,
            requested,
            f"n·ε_t = {n * plan.train_epsilon:.4g} ≥ m·ε = {m * epsilon:.4g}: fits on all rows "
            "at ε_t are better calibrated than CMS's on one part in k + 1; the η = ½ law "
            f"misses a given candidate with probability {miss:.3f} "
            f"({'≤' if miss <= MAX_MISS else '>'} {MAX_MISS:g})",
        )
    return SelectionChoice(
        "cms",
        requested,
        f"n·ε_t = {n * plan.train_epsilon:.4g} < m·ε = {m * epsilon:.4g}",
    )


def _repetition_method(k: int) -> tuple[str, float]:
    """The law of rule 3 of :func:`choose_selection` for k candidates and PS22's miss
    probability G(1 − 1/k) at η = ½: ``papernot_steinke`` when it is ≤ :data:`MAX_MISS`,
    else ``liu_talwar``."""
    miss = repetition_law("papernot_steinke", k).miss_probability(k)
    return ("papernot_steinke" if miss <= MAX_MISS else "liu_talwar"), miss


def _rule_plan(
    *,
    k: int,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    mechanism: str,
    iterations: int | None,
) -> tuple[str, RepetitionPlan]:
    """The random-repetition method and plan that rule 0 weighs (the law rule 3 would pick)."""
    method, _ = _repetition_method(k)
    gaussian = mechanism in GAUSSIAN_RUN_MECHANISMS
    plan = repetition_plan(
        method,
        k=k,
        n=n,
        epsilon=epsilon,
        delta=delta,
        mechanism=mechanism if gaussian else None,
        d=d,
        iterations=iterations,
    )
    return method, plan


def rule_cost_factor(
    mechanism: str,
    *,
    k: int,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    iterations: int | None = None,
) -> float:
    """κ that rule 0 of :func:`choose_selection` compares with :data:`MAX_COST_FACTOR` for k
    candidates (:func:`tuning_cost_factor` of the random-repetition plan rule 3 would use):
    a function of public quantities only, shown in quotes and records."""
    _, plan = _rule_plan(
        k=k, n=n, d=d, epsilon=epsilon, delta=delta, mechanism=mechanism, iterations=iterations
    )
    return tuning_cost_factor(mechanism, n=n, d=d, epsilon=epsilon, delta=delta, plan=plan)


def _rule_only(
    requested: str,
    *,
    k: int,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    mechanism: str,
    iterations: int | None,
    rule_regularization: float,
) -> SelectionChoice | None:
    """Rule 0 of :func:`choose_selection`: :data:`AUTOMATIC_LAMBDA` when κ of the
    random-repetition plan rule 3 would use exceeds :data:`MAX_COST_FACTOR`, else None."""
    gaussian = mechanism in GAUSSIAN_RUN_MECHANISMS
    method, plan = _rule_plan(
        k=k, n=n, d=d, epsilon=epsilon, delta=delta, mechanism=mechanism, iterations=iterations
    )
    kappa = tuning_cost_factor(mechanism, n=n, d=d, epsilon=epsilon, delta=delta, plan=plan)
    if kappa <= MAX_COST_FACTOR:
        return None
    return SelectionChoice(
        AUTOMATIC_LAMBDA,
        requested,
        f"tuning by {method} would fit its runs at "
        + (f"μ_r = {plan.fit_mu:.4g}" if gaussian else f"ε_t = {plan.train_epsilon:.4g}")
        + f", which costs the excess-risk bound a factor κ = {kappa:.3g} > "
        f"{MAX_COST_FACTOR:g}; the automatic λ = {rule_regularization:.4g} is fitted at the "
        "whole budget instead",
    )


def _choose_for_gaussian_runs(
    requested: str,
    *,
    k: int,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    iterations: int | None,
) -> SelectionChoice:
    """Rule 3 of :func:`choose_selection` for Gaussian runs: n·μ_r against m·μ(ε, δ)."""
    from service.dp.mechanisms.noisy_gd import gdp_mu

    m = part_size(n, k)
    method, miss = _repetition_method(k)
    plan = repetition_plan(
        method,
        k=k,
        n=n,
        epsilon=epsilon,
        delta=delta,
        mechanism="noisy_gd",
        d=d,
        iterations=iterations,
    )
    whole = gdp_mu(epsilon, delta)
    ours, theirs = n * plan.fit_mu, m * whole
    if ours >= theirs:
        return SelectionChoice(
            method,
            requested,
            f"Gaussian runs: n·μ_r = {ours:.4g} ≥ m·μ(ε, δ) = {theirs:.4g}: fits on all rows "
            "at the run's GDP parameter are better calibrated than CMS's on one part in k + 1; "
            f"the η = ½ law misses a given candidate with probability {miss:.3f} "
            f"({'≤' if miss <= MAX_MISS else '>'} {MAX_MISS:g})",
        )
    return SelectionChoice(
        "cms", requested, f"Gaussian runs: n·μ_r = {ours:.4g} < m·μ(ε, δ) = {theirs:.4g}"
    )
