"""Private choice of the regularisation λ and, for DP-SGD, the step size η (issue 16 item 2):
Chaudhuri, Monteleoni and Sarwate 2011, §6 ("Private parameter tuning"). Pure numerics.

A candidate is any setting chosen independently of the data: a λ, or a point (λ, η) of the grid
Λ × H of the request's λ and η lists (:func:`grid`, k = |Λ|·|H| ≤ :data:`MAX_CANDIDATES`). The
argument below never looks inside a candidate, so it holds for the grid as for a list of λs.
Given k candidates and a budget (ε, δ):

1. split the n rows, in an order drawn independently of the data, into k + 1 disjoint parts
   D₁..D_k, D_{k+1} of sizes ⌊n/(k+1)⌋ or ⌈n/(k+1)⌉;
2. fit candidate i on Dᵢ with the mechanism at the full (ε, δ) and candidate i's setting: wᵢ;
3. count eᵢ = #errors of wᵢ on the held-out part D_{k+1} (for a numeric label the quantised
   clipped squared error, sensitivity Δ = 64: :mod:`service.dp.analysis.task_scores`);
4. release w_I with I drawn by the exponential mechanism, P(I = i) ∝ exp(−ε eᵢ / (2Δ))
   (Δ = 1 for error counts: binary and multi-class labels).

**Privacy: (ε, δ) in total.** Every row lies in exactly one part. A row of Dᵢ (i ≤ k) enters
only wᵢ, which is (ε, δ)-DP in Dᵢ; the e's and the choice are post-processing of the models and
of D_{k+1}, which does not contain that row. A row of D_{k+1} enters only the counts: replacing
it changes each eᵢ by at most Δ (1 for an error count, q = 64 for the regression score), so
the exponential mechanism with exp(−ε e / (2Δ)) is ε-DP in D_{k+1}, and the models do not
depend on it. Parallel composition over the disjoint parts gives (ε, δ) for every row (CMS
2011, Theorem 24). Nothing but w_I is released (and the candidates, the split sizes and I,
which are functions of the release).

The price: each candidate is trained on about n/(k+1) rows, so its noise is calibrated at that
size (k+1 times the noise norm of a fit on all rows, for output perturbation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import product
from typing import Any, Final, Generic, Literal, TypeVar, overload

import numpy as np
from numpy.typing import NDArray

from service.dp.analysis.repetition import RepetitionResult, repeat_and_select
from service.dp.analysis.selection_choice import (
    AUTOMATIC_LAMBDA,
    GAUSSIAN_RUN_MECHANISMS,
    REPETITION_SELECTIONS,
    RULE_ONLY_MECHANISMS,
    SELECTIONS,
    choose_selection,
    part_size,
    repetition_plan,
)
from service.dp.analysis.task_scores import error_score, score_sensitivity
from service.dp.core.accounting import ledger_floor
from service.dp.core.base import FitResult
from service.dp.data.prepared import PreparedDesign, prepare_design
from service.dp.noise.discrete import bernoulli_exp, randbelow
from service.dp.noise.draws import uniforms

__all__ = [
    "MAX_CANDIDATES",
    "RuleOnlyResult",
    "Setting",
    "TuningResult",
    "exponential_mechanism",
    "grid",
    "split_parts",
    "tune",
]

#: At most this many candidates (each costs a fit on n/(k+1) rows); for a grid Λ × H, at most
#: this many points.
MAX_CANDIDATES: Final[int] = 10

C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class Setting:
    """One candidate of the grid: the regularisation λ and, when tuned, DP-SGD's step size η
    (``None``: the request's own ``eta``, or the mechanism's default)."""

    regularization: float
    eta: float | None = None

    def to_dict(self) -> dict[str, float]:
        out = {"regularization": self.regularization}
        if self.eta is not None:
            out["eta"] = self.eta
        return out


def grid(regularizations: Sequence[float], etas: Sequence[float] | None = None) -> list[Setting]:
    """The candidates Λ × H, λ-major (all η of λ₁ first); just Λ when no η is tuned.
    ValueError past :data:`MAX_CANDIDATES` points."""
    if not regularizations or (etas is not None and not etas):
        raise ValueError("a grid needs at least one value on each axis")
    points = (
        [Setting(float(lam)) for lam in regularizations]
        if etas is None
        else [Setting(float(lam), float(eta)) for lam, eta in product(regularizations, etas)]
    )
    if len(points) > MAX_CANDIDATES:
        raise ValueError(f"the grid has {len(points)} points; at most {MAX_CANDIDATES}")
    return points


def _distinct(values: Sequence[float]) -> list[float]:
    return list(dict.fromkeys(values))


@dataclass(frozen=True, slots=True)
class TuningResult(Generic[C]):
    """The chosen fit and what the record shows about the selection."""

    chosen: int
    result: FitResult
    candidates: tuple[C, ...]
    part_sizes: tuple[int, ...]
    #: Δ of the held-out score (:func:`~service.dp.analysis.task_scores.score_sensitivity`).
    score_sensitivity: int = 1

    def record(self: TuningResult[Setting], epsilon: float, delta: float) -> dict[str, Any]:
        """The ``tuning`` part of the model's privacy record: the λ candidates, the η
        candidates when DP-SGD's step size was tuned, the grid in order, the chosen point and
        the split of ε."""
        settings = self.candidates
        chosen = settings[self.chosen]
        tuned_eta = any(s.eta is not None for s in settings)
        score = (
            "held-out error counts (sensitivity 1)"
            if self.score_sensitivity == 1
            else "the held-out clipped squared error Σ⌈64·(y − clip(wᵀx, −1, 1))²/4⌉ "
            f"(sensitivity {self.score_sensitivity})"
        )
        out: dict[str, Any] = {
            "method": "Chaudhuri, Monteleoni and Sarwate 2011 private tuning: candidate i fitted "
            f"on disjoint part i at the full (ε, δ), chosen by the exponential mechanism on "
            f"{score} with ε",
            "candidates": _distinct([s.regularization for s in settings]),
        }
        if tuned_eta:
            out["step_size_candidates"] = _distinct([float(s.eta or 0.0) for s in settings])
        out.update(
            {
                "grid": [s.to_dict() for s in settings],
                "chosen_index": self.chosen,
                "chosen_regularization": chosen.regularization,
            }
        )
        if tuned_eta:
            out["chosen_eta"] = chosen.eta
        return out | {
            "part_sizes": list(self.part_sizes),
            "epsilon_split": {
                "each_candidate_fit": epsilon,
                "selection": epsilon,
                "total": epsilon,
                "composition": "parallel: every row is in exactly one part",
            },
            "delta": delta,
        }


@dataclass(frozen=True, slots=True)
class RuleOnlyResult(Generic[C]):
    """``auto`` declined to tune
    (:func:`~service.dp.analysis.selection_choice.choose_selection`, :data:`AUTOMATIC_LAMBDA`):
    the automatic λ's fit on all rows at the whole budget, and why."""

    candidate: C
    result: FitResult
    reason: str
    #: The candidates that were asked for (none was fitted).
    candidates: tuple[C, ...]

    def record(self, epsilon: float, delta: float) -> dict[str, Any]:
        """The ``tuning`` part of the record: no selection ran, the rule's λ at (ε, δ)."""
        return {
            "method": "automatic λ only: tuning's expected cost exceeds its expected gain "
            "(service/dp/analysis/selection_choice.py, tuning_cost_factor)",
            "reason": self.reason,
            "candidates": [_regularization_of(c) for c in self.candidates],
            "chosen_regularization": _regularization_of(self.candidate),
            "epsilon_split": {"fit": epsilon, "selection": 0.0, "total": epsilon},
            "delta": delta,
        }


def split_parts(n: int, k: int, rng: np.random.Generator | None) -> list[NDArray[np.intp]]:
    """k + 1 disjoint index sets covering range(n), from an order independent of the data
    (a permutation drawn with CSPRNG uniforms when ``rng`` is None)."""
    order = np.argsort(uniforms(n, rng), kind="stable")
    return [np.sort(part) for part in np.array_split(order, k + 1)]


def exponential_mechanism(
    errors: Sequence[int],
    epsilon: float,
    rng: np.random.Generator | None,
    sensitivity: int = 1,
) -> tuple[int, tuple[float, ...]]:
    """Index i with probability exactly ∝ exp(−ε eᵢ / (2Δ)) (ε-DP for integer scores of
    sensitivity Δ = ``sensitivity``, 1 for error counts), and the probabilities (floats,
    computed stably from the minimum error; never released).

    Exact sampling (issue 19 §1): propose i uniformly, accept with probability
    exp(−ε(eᵢ − e_min)/2), decided exactly by CKS's Bernoulli(e^{−γ}) on the rational γ (ε is a
    double, hence rational; the eᵢ are integers). An accepted i has probability
    ∝ (1/k)·exp(−ε eᵢ/2)·exp(ε e_min/2) ∝ exp(−ε eᵢ/2), so the ratio of the law's
    probabilities between neighbours is bounded by e^ε exactly, with every candidate possible;
    a float CDF searched with a 52-bit uniform would round small probabilities to zero.
    The candidate with the smallest error is accepted surely, so ≤ k proposals on average.
    """
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int) or sensitivity < 1:
        raise ValueError("the score's sensitivity must be a positive integer")
    e = np.asarray(errors, dtype=np.float64)
    logits = -epsilon * (e - e.min()) / (2.0 * sensitivity)
    weights = np.exp(logits)
    probs = weights / weights.sum()
    counts = [int(v) for v in errors]
    best = min(counts)
    half_epsilon = Fraction(epsilon) / (2 * sensitivity)
    while True:
        index = randbelow(len(counts), rng)
        if bernoulli_exp(half_epsilon * (counts[index] - best), rng):
            return index, tuple(float(p) for p in probs)


@overload
def tune(
    design: PreparedDesign,
    candidates: Sequence[C],
    *,
    epsilon: float,
    fit_one: Callable[[PreparedDesign, C], FitResult],
    rng: np.random.Generator | None,
    method: Literal["cms"] = "cms",
    delta: float = 0.0,
    fit_at: Callable[[PreparedDesign, C, float], FitResult] | None = None,
) -> TuningResult[C]: ...


@overload
def tune(
    design: PreparedDesign,
    candidates: Sequence[C],
    *,
    epsilon: float,
    fit_one: Callable[[PreparedDesign, C], FitResult],
    rng: np.random.Generator | None,
    method: str,
    delta: float = 0.0,
    fit_at: Callable[[PreparedDesign, C, float], FitResult] | None = None,
    rule_candidate: None = None,
    mechanism: str | None = None,
) -> TuningResult[C] | RepetitionResult[C]: ...


@overload
def tune(
    design: PreparedDesign,
    candidates: Sequence[C],
    *,
    epsilon: float,
    fit_one: Callable[[PreparedDesign, C], FitResult],
    rng: np.random.Generator | None,
    method: str,
    delta: float = 0.0,
    fit_at: Callable[[PreparedDesign, C, float], FitResult] | None = None,
    rule_candidate: C,
    mechanism: str | None = None,
) -> TuningResult[C] | RepetitionResult[C] | RuleOnlyResult[C]: ...


def tune(
    design: PreparedDesign,
    candidates: Sequence[C],
    *,
    epsilon: float,
    fit_one: Callable[[PreparedDesign, C], FitResult],
    rng: np.random.Generator | None,
    method: str = "cms",
    delta: float = 0.0,
    fit_at: Callable[[PreparedDesign, C, float], FitResult] | None = None,
    rule_candidate: C | None = None,
    mechanism: str | None = None,
) -> TuningResult[C] | RepetitionResult[C] | RuleOnlyResult[C]:
    """Private selection among ``candidates`` within (ε, δ).

    ``method="cms"`` (the default): CMS 2011 private tuning (module docstring);
    ``fit_one(part, candidate)`` runs the mechanism at (ε, δ) with the candidate's setting (a λ,
    or a :class:`Setting`) on a part. ``"papernot_steinke"`` / ``"liu_talwar"``: random
    repetition (:mod:`service.dp.analysis.repetition`), where ``fit_at(design, candidate, ε_t)``
    runs the mechanism at (ε_t, 0) on all rows. ``"auto"``:
    :func:`~service.dp.analysis.selection_choice.choose_selection` with the candidates' smallest
    λ (candidates that are λs or :class:`Setting` values).

    With ``method="auto"`` and ``rule_candidate`` (the mechanism's automatic λ, public, for a
    ``mechanism`` of :data:`RULE_ONLY_MECHANISMS` with pure runs): when
    :func:`~service.dp.analysis.selection_choice.tuning_cost_factor` exceeds
    :data:`~service.dp.analysis.selection_choice.MAX_COST_FACTOR` no selection is run and the
    rule's candidate is fitted on all rows at the whole ε (:class:`RuleOnlyResult`, whose
    record says why); otherwise the rule's candidate joins the candidates (when absent and
    there is room) and the selection runs as above."""
    if method != "cms":
        return _tune_by_repetition(
            design,
            candidates,
            epsilon=epsilon,
            delta=delta,
            method=method,
            fit_at=fit_at,
            rng=rng,
            fit_one=fit_one,
            rule_candidate=rule_candidate,
            mechanism=mechanism,
        )
    if rule_candidate is not None:
        raise ValueError("the automatic λ is weighed against tuning only by method='auto'")
    k = len(candidates)
    if not 1 <= k <= MAX_CANDIDATES:
        raise ValueError(f"between 1 and {MAX_CANDIDATES} candidates")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("private tuning needs a finite ε > 0")
    if part_size(design.n, k) < 2:
        raise ValueError("too few rows for this many candidates")
    parts = split_parts(design.n, k, rng)
    held = parts[-1]
    X_held, y_held = design.X[held], design.y[held]
    results: list[FitResult] = []
    errors: list[int] = []
    for candidate, part in zip(candidates, parts[:-1], strict=True):
        piece = prepare_design(design.X[part], design.y[part], design.task, design.n_classes)
        result = fit_one(piece, candidate)
        results.append(result)
        errors.append(error_score(result.model, X_held, y_held, design.task))
    # the errors and the probabilities are functions of private data: never released
    # calibrated with what the ledger charges, never more (issue 19 §4)
    chosen, _ = exponential_mechanism(
        errors, ledger_floor(epsilon), rng, sensitivity=score_sensitivity(design.task)
    )
    return TuningResult(
        chosen=chosen,
        result=results[chosen],
        candidates=tuple(candidates),
        part_sizes=tuple(int(p.size) for p in parts),
        score_sensitivity=score_sensitivity(design.task),
    )


def _regularization_of(candidate: object) -> float:
    if isinstance(candidate, Setting):
        return candidate.regularization
    if isinstance(candidate, int | float):
        return float(candidate)
    raise ValueError("auto selection needs candidates that are λs or Settings")


def _tune_by_repetition(
    design: PreparedDesign,
    candidates: Sequence[C],
    *,
    epsilon: float,
    delta: float,
    method: str,
    fit_at: Callable[[PreparedDesign, C, float], FitResult] | None,
    fit_one: Callable[[PreparedDesign, C], FitResult],
    rng: np.random.Generator | None,
    rule_candidate: C | None = None,
    mechanism: str | None = None,
) -> TuningResult[C] | RepetitionResult[C] | RuleOnlyResult[C]:
    k = len(candidates)
    if not 1 <= k <= MAX_CANDIDATES:
        raise ValueError(f"between 1 and {MAX_CANDIDATES} candidates")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("private selection needs a finite ε > 0")
    if rule_candidate is not None and (
        method != "auto" or mechanism not in RULE_ONLY_MECHANISMS - GAUSSIAN_RUN_MECHANISMS
    ):
        raise ValueError(
            "the automatic λ is weighed against tuning only by method='auto', for "
            + ", ".join(sorted(RULE_ONLY_MECHANISMS - GAUSSIAN_RUN_MECHANISMS))
        )
    if method == "auto":
        choice = choose_selection(
            "auto",
            k=k,
            n=design.n,
            d=int(design.X.shape[1]),
            epsilon=epsilon,
            delta=delta,
            min_regularization=min(_regularization_of(c) for c in candidates),
            repetition_possible=fit_at is not None,
            rule_regularization=(
                None if rule_candidate is None else _regularization_of(rule_candidate)
            ),
            mechanism=None if rule_candidate is None else mechanism,
        )
        method = choice.method
        if method == AUTOMATIC_LAMBDA:
            assert fit_at is not None
            assert rule_candidate is not None
            return RuleOnlyResult(
                candidate=rule_candidate,
                result=fit_at(design, rule_candidate, epsilon),
                reason=choice.reason,
                candidates=tuple(candidates),
            )
        # the automatic λ is always a candidate when there is room
        if rule_candidate is not None and rule_candidate not in candidates and k < MAX_CANDIDATES:
            candidates = [*candidates, rule_candidate]
            k += 1
            method = choose_selection(
                "auto",
                k=k,
                n=design.n,
                d=int(design.X.shape[1]),
                epsilon=epsilon,
                delta=delta,
                min_regularization=min(_regularization_of(c) for c in candidates),
                repetition_possible=True,
            ).method
        if method == "cms":
            return tune(design, candidates, epsilon=epsilon, fit_one=fit_one, rng=rng)
    if method not in REPETITION_SELECTIONS:
        raise ValueError(f"selection must be one of {', '.join(SELECTIONS)}")
    if fit_at is None:
        raise ValueError("random repetition needs fit_at(design, candidate, ε_t)")
    plan = repetition_plan(method, k=k, n=design.n, epsilon=epsilon, delta=delta)
    fit = fit_at

    def fit_all_rows(full: PreparedDesign, candidate: C) -> FitResult:
        return fit(full, candidate, plan.train_epsilon)

    return repeat_and_select(design, candidates, plan=plan, fit_one=fit_all_rows, rng=rng)
