"""Private choice of the regularisation λ and, for DP-SGD, the step size η (issue 16 item 2):
Chaudhuri, Monteleoni and Sarwate 2011, §6 ("Private parameter tuning"). Pure numerics.

A candidate is any setting chosen independently of the data: a λ, or a point (λ, η) of the grid
Λ × H of the request's λ and η lists (:func:`grid`, k = |Λ|·|H| ≤ :data:`MAX_CANDIDATES`). The
argument below never looks inside a candidate, so it holds for the grid as for a list of λs.
Given k candidates and a budget (ε, δ):

1. split the n rows, in an order drawn independently of the data, into k + 1 disjoint parts
   D₁..D_k, D_{k+1} of sizes ⌊n/(k+1)⌋ or ⌈n/(k+1)⌉;
2. fit candidate i on Dᵢ with the mechanism at the full (ε, δ) and candidate i's setting: wᵢ;
3. count eᵢ = #errors of wᵢ on the held-out part D_{k+1};
4. release w_I with I drawn by the exponential mechanism, P(I = i) ∝ exp(−ε eᵢ / 2).

**Privacy: (ε, δ) in total.** Every row lies in exactly one part. A row of Dᵢ (i ≤ k) enters
only wᵢ, which is (ε, δ)-DP in Dᵢ; the e's and the choice are post-processing of the models and
of D_{k+1}, which does not contain that row. A row of D_{k+1} enters only the counts: replacing
it changes each eᵢ by at most 1 (sensitivity Δ = 1), so the exponential mechanism with
exp(−ε e / (2Δ)) is ε-DP in D_{k+1}, and the models do not depend on it. Parallel composition
over the disjoint parts gives (ε, δ) for every row (CMS 2011, Theorem 24). Nothing but w_I is
released (and the candidates, the split sizes and I, which are functions of the release).

The price: each candidate is trained on about n/(k+1) rows, so its noise is calibrated at that
size (k+1 times the noise norm of a fit on all rows, for output perturbation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import product
from typing import Any, Final, Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from service.dp.core.accounting import ledger_floor
from service.dp.core.base import FitResult
from service.dp.data.prepared import PreparedDesign, prepare_design
from service.dp.noise.discrete import bernoulli_exp, randbelow
from service.dp.noise.draws import uniforms

__all__ = [
    "MAX_CANDIDATES",
    "Setting",
    "TuningResult",
    "exponential_mechanism",
    "grid",
    "part_size",
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

    def record(self: TuningResult[Setting], epsilon: float, delta: float) -> dict[str, Any]:
        """The ``tuning`` part of the model's privacy record: the λ candidates, the η
        candidates when DP-SGD's step size was tuned, the grid in order, the chosen point and
        the split of ε."""
        settings = self.candidates
        chosen = settings[self.chosen]
        tuned_eta = any(s.eta is not None for s in settings)
        out: dict[str, Any] = {
            "method": "Chaudhuri, Monteleoni and Sarwate 2011 private tuning: candidate i fitted "
            "on disjoint part i at the full (ε, δ), chosen by the exponential mechanism on "
            "held-out error counts (sensitivity 1) with ε",
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


def part_size(n: int, k: int) -> int:
    """The smallest part when n rows are split into k + 1 parts: ⌊n/(k+1)⌋."""
    return n // (k + 1)


def split_parts(n: int, k: int, rng: np.random.Generator | None) -> list[NDArray[np.intp]]:
    """k + 1 disjoint index sets covering range(n), from an order independent of the data
    (a permutation drawn with CSPRNG uniforms when ``rng`` is None)."""
    order = np.argsort(uniforms(n, rng), kind="stable")
    return [np.sort(part) for part in np.array_split(order, k + 1)]


def exponential_mechanism(
    errors: Sequence[int], epsilon: float, rng: np.random.Generator | None
) -> tuple[int, tuple[float, ...]]:
    """Index i with probability exactly ∝ exp(−ε eᵢ / 2) (ε-DP for counts of sensitivity 1),
    and the probabilities (floats, computed stably from the minimum error; never released).

    Exact sampling (issue 19 §1): propose i uniformly, accept with probability
    exp(−ε(eᵢ − e_min)/2), decided exactly by CKS's Bernoulli(e^{−γ}) on the rational γ (ε is a
    double, hence rational; the eᵢ are integers). An accepted i has probability
    ∝ (1/k)·exp(−ε eᵢ/2)·exp(ε e_min/2) ∝ exp(−ε eᵢ/2), so the ratio of the law's
    probabilities between neighbours is bounded by e^ε exactly, with every candidate possible;
    a float CDF searched with a 52-bit uniform would round small probabilities to zero.
    The candidate with the smallest error is accepted surely, so ≤ k proposals on average.
    """
    e = np.asarray(errors, dtype=np.float64)
    logits = -epsilon * (e - e.min()) / 2.0
    weights = np.exp(logits)
    probs = weights / weights.sum()
    counts = [int(v) for v in errors]
    best = min(counts)
    half_epsilon = Fraction(epsilon) / 2
    while True:
        index = randbelow(len(counts), rng)
        if bernoulli_exp(half_epsilon * (counts[index] - best), rng):
            return index, tuple(float(p) for p in probs)


def tune(
    design: PreparedDesign,
    candidates: Sequence[C],
    *,
    epsilon: float,
    fit_one: Callable[[PreparedDesign, C], FitResult],
    rng: np.random.Generator | None,
) -> TuningResult[C]:
    """CMS 2011 private tuning (module docstring); ``fit_one(part, candidate)`` runs the
    mechanism at (ε, δ) with the candidate's setting (a λ, or a :class:`Setting`) on a part."""
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
        result = fit_one(prepare_design(design.X[part], design.y[part]), candidate)
        results.append(result)
        scores = result.model.decision_function(X_held)
        errors.append(int(np.sum((scores > 0) != (y_held > 0))))
    # the errors and the probabilities are functions of private data: never released
    # calibrated with what the ledger charges, never more (issue 19 §4)
    chosen, _ = exponential_mechanism(errors, ledger_floor(epsilon), rng)
    return TuningResult(
        chosen=chosen,
        result=results[chosen],
        candidates=tuple(candidates),
        part_sizes=tuple(int(p.size) for p in parts),
    )
