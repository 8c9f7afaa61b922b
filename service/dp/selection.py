"""Private choice of the regularisation λ (issue 16 item 2): Chaudhuri, Monteleoni and
Sarwate 2011, §6 ("Private parameter tuning"). Pure numerics.

Given k candidates λ₁..λ_k and a budget (ε, δ):

1. split the n rows, in an order drawn independently of the data, into k + 1 disjoint parts
   D₁..D_k, D_{k+1} of sizes ⌊n/(k+1)⌋ or ⌈n/(k+1)⌉;
2. fit candidate i on Dᵢ with the mechanism at the full (ε, δ): wᵢ;
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
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.dp.base import FitResult
from service.dp.noise import uniforms
from service.dp.prepared import PreparedDesign, prepare_design

__all__ = [
    "MAX_CANDIDATES",
    "TuningResult",
    "exponential_mechanism",
    "part_size",
    "split_parts",
    "tune",
]

#: At most this many candidates (each costs a fit on n/(k+1) rows).
MAX_CANDIDATES: Final[int] = 10

FitOne = Callable[[PreparedDesign, float], FitResult]


@dataclass(frozen=True, slots=True)
class TuningResult:
    """The chosen fit and what the record shows about the selection."""

    chosen: int
    result: FitResult
    candidates: tuple[float, ...]
    part_sizes: tuple[int, ...]

    def record(self, epsilon: float, delta: float) -> dict[str, Any]:
        """The ``tuning`` part of the model's privacy record."""
        return {
            "method": "Chaudhuri, Monteleoni and Sarwate 2011 private tuning: candidate i fitted "
            "on disjoint part i at the full (ε, δ), chosen by the exponential mechanism on "
            "held-out error counts (sensitivity 1) with ε",
            "candidates": list(self.candidates),
            "chosen_index": self.chosen,
            "chosen_regularization": self.candidates[self.chosen],
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
    """Index i with probability ∝ exp(−ε eᵢ / 2) (ε-DP for counts of sensitivity 1), and the
    probabilities (computed stably from the minimum error)."""
    e = np.asarray(errors, dtype=np.float64)
    logits = -epsilon * (e - e.min()) / 2.0
    weights = np.exp(logits)
    probs = weights / weights.sum()
    u = float(uniforms(1, rng)[0])
    index = int(np.searchsorted(np.cumsum(probs), u, side="right"))
    return min(index, len(probs) - 1), tuple(float(p) for p in probs)


def tune(
    design: PreparedDesign,
    candidates: Sequence[float],
    *,
    epsilon: float,
    fit_one: FitOne,
    rng: np.random.Generator | None,
) -> TuningResult:
    """CMS 2011 private tuning (module docstring); ``fit_one(part, λ)`` runs the mechanism at
    (ε, δ) on a part."""
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
    for lam, part in zip(candidates, parts[:-1], strict=True):
        result = fit_one(prepare_design(design.X[part], design.y[part]), float(lam))
        results.append(result)
        scores = result.model.decision_function(X_held)
        errors.append(int(np.sum((scores > 0) != (y_held > 0))))
    # the errors and the probabilities are functions of private data: never released
    chosen, _ = exponential_mechanism(errors, epsilon, rng)
    return TuningResult(
        chosen=chosen,
        result=results[chosen],
        candidates=tuple(float(c) for c in candidates),
        part_sizes=tuple(int(p.size) for p in parts),
    )
