"""Empirical privacy audit: a statistical lower bound on the ε a mechanism really spends.

Usage (the pattern every mechanism test follows)::

    outs_d = np.array([statistic(mechanism(D, rng)) for _ in range(R)])
    outs_dp = np.array([statistic(mechanism(D_prime, rng)) for _ in range(R)])
    assert epsilon_lower_bound(outs_d, outs_dp) < claimed_epsilon

Here ``D`` and ``D_prime`` are neighbouring datasets (one record replaced, ideally by an
extreme point) and ``statistic`` maps one release to a real number (a coordinate, a
projection on the direction in which the two datasets pull the model apart, …).

The argument. If M is (ε, δ)-DP then for every event S and both orders of the pair,
P[M(D) ∈ S] ≤ e^ε · P[M(D′) ∈ S] + δ, i.e. ε ≥ ln((p − δ)/q) with p = P[M(D) ∈ S] and
q = P[M(D′) ∈ S]. We test the events S = {s > t} and S = {s ≤ t} for thresholds t, in
both directions (D against D′ and D′ against D). For each such test we take a one-sided
Clopper–Pearson lower bound p_lo on p and upper bound q_hi on q, each at level α/(2m) for m
tests (Bonferroni; α = 1 − confidence). With probability ≥ 1 − α all 2m bounds hold at once,
and then every ln((p_lo − δ)/q_hi) ≤ ln((p − δ)/q) ≤ ε. The maximum over the tests is
therefore a (1 − α)-confidence lower bound on ε: for a truly (ε, δ)-DP mechanism it exceeds ε
with probability at most α, whatever the thresholds were, as long as they were not chosen by
looking at the samples used for the bounds.

Threshold choice. When ``thresholds`` is None the runs are split: the first half of each
sample (the *selection* half) is used to pick the ``n_selected`` most promising (threshold,
event, direction) tests among candidate thresholds at pooled quantiles (and midway between
consecutive ones); the bound is then
computed on the second halves only, with Bonferroni over the selected tests. The runs must be
i.i.d. (independent seeded runs), so the two halves are independent and the bound is valid.
Pass explicit ``thresholds`` (fixed before sampling) to use all runs with Bonferroni over all
4·len(thresholds) tests instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

__all__ = [
    "AuditTest",
    "SequentialAudit",
    "audit_tests",
    "epsilon_lower_bound",
    "event_upper_bound",
    "sequential_audit",
]

#: Candidate quantile levels for the selection step (pooled selection halves).
_CANDIDATE_LEVELS = np.concatenate(
    [
        [0.001, 0.002, 0.005],
        np.linspace(0.01, 0.99, 50),
        [0.995, 0.998, 0.999],
    ]
)


@dataclass(frozen=True)
class AuditTest:
    """One threshold test: ``event`` is ``"above"`` ({s > t}) or ``"below"`` ({s ≤ t});
    ``forward`` True compares D against D′ (p from D), False the other way round."""

    threshold: float
    event: str
    forward: bool
    bound: float


def _as_sample(values: ArrayLike, name: str) -> NDArray[np.float64]:
    arr = np.asarray(values, dtype=np.float64).ravel()
    if arr.size < 2:
        raise ValueError(f"{name} needs at least 2 runs, got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values")
    return arr


def _cp_lower(k: NDArray[np.int64], n: int, alpha: float) -> NDArray[np.float64]:
    """One-sided Clopper–Pearson lower bound on a binomial p from k successes in n."""
    out = np.zeros(k.shape, dtype=np.float64)
    pos = k > 0
    out[pos] = stats.beta.ppf(alpha, k[pos], n - k[pos] + 1)
    return out


def _cp_upper(k: NDArray[np.int64], n: int, alpha: float) -> NDArray[np.float64]:
    """One-sided Clopper–Pearson upper bound on a binomial p from k successes in n."""
    out = np.ones(k.shape, dtype=np.float64)
    lt = k < n
    out[lt] = stats.beta.ppf(1.0 - alpha, k[lt] + 1, n - k[lt])
    return out


def _bounds(
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    thresholds: NDArray[np.float64],
    *,
    alpha_each: float,
    delta: float,
) -> list[AuditTest]:
    """ln((p_lo − δ)/q_hi) for every (threshold, event, direction), each bound at alpha_each."""
    a_sorted = np.sort(a)
    b_sorted = np.sort(b)
    # counts of s ≤ t
    ka_below = np.searchsorted(a_sorted, thresholds, side="right").astype(np.int64)
    kb_below = np.searchsorted(b_sorted, thresholds, side="right").astype(np.int64)
    na, nb = a.size, b.size
    counts = {
        "below": (ka_below, kb_below),
        "above": (na - ka_below, nb - kb_below),
    }
    tests: list[AuditTest] = []
    for event, (ka, kb) in counts.items():
        for forward in (True, False):
            kp, np_, kq, nq = (ka, na, kb, nb) if forward else (kb, nb, ka, na)
            p_lo = _cp_lower(kp, np_, alpha_each) - delta
            q_hi = _cp_upper(kq, nq, alpha_each)
            with np.errstate(divide="ignore", invalid="ignore"):
                vals = np.where(p_lo > 0.0, np.log(np.maximum(p_lo, 1e-300) / q_hi), -np.inf)
            tests.extend(
                AuditTest(float(t), event, forward, float(v))
                for t, v in zip(thresholds, vals, strict=True)
            )
    return tests


def audit_tests(
    outputs_d: ArrayLike,
    outputs_d_prime: ArrayLike,
    *,
    confidence: float = 0.95,
    delta: float = 0.0,
    thresholds: Sequence[float] | None = None,
    n_selected: int = 3,
) -> list[AuditTest]:
    """The evaluated tests behind :func:`epsilon_lower_bound`, best first (for diagnostics)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}")
    if n_selected < 1:
        raise ValueError(f"n_selected must be at least 1, got {n_selected}")
    a = _as_sample(outputs_d, "outputs_d")
    b = _as_sample(outputs_d_prime, "outputs_d_prime")
    alpha = 1.0 - confidence

    if thresholds is not None:
        ts = np.asarray(thresholds, dtype=np.float64).ravel()
        if ts.size == 0 or not np.all(np.isfinite(ts)):
            raise ValueError("thresholds must be a non-empty sequence of finite numbers")
        m = 4 * ts.size
        tests = _bounds(a, b, ts, alpha_each=alpha / (2 * m), delta=delta)
        return sorted(tests, key=lambda t: t.bound, reverse=True)

    if a.size < 4 or b.size < 4:
        raise ValueError("threshold selection needs at least 4 runs per dataset")
    a_sel, a_eval = a[: a.size // 2], a[a.size // 2 :]
    b_sel, b_eval = b[: b.size // 2], b[b.size // 2 :]
    quantiles = np.unique(np.quantile(np.concatenate([a_sel, b_sel]), _CANDIDATE_LEVELS))
    # midpoints too, so that a gap in the outputs (an atom, a rare far-away value) can be
    # separated from the bulk
    candidates = np.unique(np.concatenate([quantiles, (quantiles[1:] + quantiles[:-1]) / 2]))
    # Rank candidates by the bound they would give at the final per-test level.
    alpha_each = alpha / (2 * n_selected)
    ranked = sorted(
        _bounds(a_sel, b_sel, candidates, alpha_each=alpha_each, delta=delta),
        key=lambda t: t.bound,
        reverse=True,
    )
    chosen = ranked[:n_selected]
    evaluated: list[AuditTest] = []
    for test in chosen:
        (match,) = [
            t
            for t in _bounds(
                a_eval, b_eval, np.array([test.threshold]), alpha_each=alpha_each, delta=delta
            )
            if t.event == test.event and t.forward == test.forward
        ]
        evaluated.append(match)
    return sorted(evaluated, key=lambda t: t.bound, reverse=True)


def epsilon_lower_bound(
    outputs_d: ArrayLike,
    outputs_d_prime: ArrayLike,
    *,
    confidence: float = 0.95,
    delta: float = 0.0,
    thresholds: Sequence[float] | None = None,
    n_selected: int = 3,
) -> float:
    """A ``confidence``-level lower bound on the ε of an (ε, δ)-DP mechanism (0 if none).

    ``outputs_d`` and ``outputs_d_prime`` are one scalar statistic per independent run on two
    neighbouring datasets. See the module docstring for the argument and the threshold choice.
    """
    tests = audit_tests(
        outputs_d,
        outputs_d_prime,
        confidence=confidence,
        delta=delta,
        thresholds=thresholds,
        n_selected=n_selected,
    )
    best = max(t.bound for t in tests)
    return best if math.isfinite(best) and best > 0.0 else 0.0


def event_upper_bound(
    outputs_d: ArrayLike,
    outputs_d_prime: ArrayLike,
    *,
    threshold: float,
    confidence: float = 0.95,
    delta: float = 0.0,
) -> float:
    """A ``confidence``-level upper bound on ln((p − δ)/q) for the one event S = {s > t}, p
    from D and q from D′ (−∞ when even p's upper bound is at most δ, +∞ when q's lower bound
    is 0).

    With p_hi the one-sided Clopper–Pearson upper bound on p and q_lo the lower bound on q,
    each at α/2, both hold with probability ≥ 1 − α, and then ln((p − δ)/q) ≤
    ln((p_hi − δ)/q_lo). A bound below the claimed ε shows that this event does not reach the
    claim: it cannot certify privacy (other events may), but it excludes an alternative whose
    value at this event is above the claim, such as a mechanism with half its noise.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    a = _as_sample(outputs_d, "outputs_d")
    b = _as_sample(outputs_d_prime, "outputs_d_prime")
    alpha = 1.0 - confidence
    kp = np.array([np.count_nonzero(a > threshold)], dtype=np.int64)
    kq = np.array([np.count_nonzero(b > threshold)], dtype=np.int64)
    p_hi = float(_cp_upper(kp, a.size, alpha / 2.0)[0]) - delta
    q_lo = float(_cp_lower(kq, b.size, alpha / 2.0)[0])
    if p_hi <= 0.0:
        return -math.inf
    if q_lo <= 0.0:
        return math.inf
    return math.log(p_hi / q_lo)


@dataclass(frozen=True)
class SequentialAudit:
    """What :func:`sequential_audit` saw at its last look: the lower bound, the event's upper
    bound and the runs per dataset it took."""

    bound: float
    upper: float
    runs: int


def sequential_audit(
    draw: Callable[[int], tuple[NDArray[np.float64], NDArray[np.float64]]],
    *,
    looks: Sequence[int],
    claim: float,
    tight: float,
    decisive: float,
    thresholds: Sequence[float],
    confidence: float = 0.99,
    delta: float = 0.0,
) -> SequentialAudit:
    """The audit with group-sequential stopping: ``draw(n)`` returns n more runs on D and on
    D′, and after each look (``looks`` are the cumulative runs per dataset, K of them) the
    lower bound L (:func:`epsilon_lower_bound` on the fixed ``thresholds``) and the upper
    bound U of the event {s > ``decisive``} (:func:`event_upper_bound`) are computed at
    confidence 1 − α/K each, α = 1 − ``confidence``.

    It stops at the first look where L ≥ ``claim`` (a violation: the caller's assertion fails)
    or where both tight·claim < L and U < claim hold: the bound is then decided on both sides,
    the mechanism spends more than ``tight``·claim and the decisive event does not reach the
    claim. Otherwise it runs to the last look.

    Guarantees (Bonferroni over the K looks): a mechanism that is truly (claim, δ)-DP has
    L ≥ claim at some look with probability ≤ α, as the fixed-size audit at confidence 1 − α;
    a mechanism whose value ln((p − δ)/q) at the decisive event is ≥ claim (half the noise,
    for the thresholds the callers use) stops early as a pass with probability ≤ α, so it
    either runs to a look where L ≥ claim or to the end, where the caller's assertions apply.
    """
    if not looks or any(b <= a for a, b in pairwise(looks)) or looks[0] < 2:
        raise ValueError("looks must be increasing run counts of at least 2")
    level = 1.0 - (1.0 - confidence) / len(looks)
    z_d = np.empty(0)
    z_dp = np.empty(0)
    result = SequentialAudit(0.0, math.inf, 0)
    for runs in looks:
        more_d, more_dp = draw(runs - z_d.size)
        z_d = np.concatenate([z_d, more_d])
        z_dp = np.concatenate([z_dp, more_dp])
        lower = epsilon_lower_bound(z_d, z_dp, confidence=level, delta=delta, thresholds=thresholds)
        upper = event_upper_bound(z_d, z_dp, threshold=decisive, confidence=level, delta=delta)
        result = SequentialAudit(lower, upper, runs)
        if lower >= claim or (lower > tight * claim and upper < claim):
            break
    return result
