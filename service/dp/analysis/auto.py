"""``"mechanism": "auto"``: the single-dataset mechanism (and λ) chosen for a request by its
predicted accuracy, from public quantities only (issue 28 item 3; docs/design.md §3).

Pure; reads no private data and spends nothing. The choice is a deterministic function of the
public inputs (n, d, ε, δ, loss, the λ asked for if any, and a public reference), so telling the
caller what was chosen, and why, releases nothing about the data and costs no budget.

**Candidates.** Every private single-dataset mechanism in :data:`AUTO_MECHANISMS` that exists in
this build (``noisy_gd`` joins when it is registered), at its default settings, times the λ
values: the request's λ when it gives one, else, for a mechanism with an automatic-λ rule
(:func:`service.dp.analysis.regularization.auto_regularization`, public inputs only), the
rule's λ at the request's (n, d, ε, δ), and the public grid :data:`LAMBDA_GRID` for the others
(DP-SGD). (The grid for every mechanism let the reference's simulation pick λ as well, and it
picked λ = 0.1 at small ε on Adult, 1.5–6 points below the rule's λ: benchmarks/RESULTS.md,
"Utility per ε".) A candidate whose calibration refuses the public inputs (e.g. the Gaussian
mechanisms at δ = 0, objective perturbation with a non-smooth loss) is left out, with the
reason recorded.

**Projection.** When the pick is ``objective_perturbation`` and the request gives no λ, the
public rule of :mod:`service.dp.analysis.projection_rule` may project the rows to
k = max(2, ⌈c·(nε)^(2/3)⌉) dimensions (when 3k < d): the pick then becomes objective
perturbation with ``projection_dim`` k at the automatic λ for d = k, simulated on the same
draws for its band, and the record's ``projection_rule`` shows k, its inputs and the
unprojected pick. The rule, not the simulation, decides: the synthetic reference spreads its
signal evenly over all d directions, the one case where a projection can only lose, while real
features are correlated (benchmarks/RESULTS.md, "A public projection dimension for objective
perturbation").

**Transfer** (only with public reference rows): hypothesis transfer towards the public rows'
own exact model w₀ (:func:`~service.dp.analysis.auto_simulation.public_source`,
λ = :data:`~service.dp.analysis.auto_simulation.SOURCE_LAMBDA`), i.e. objective perturbation
centred on w₀ with strength η ∈ :data:`TRANSFER_STRENGTHS`
(:func:`service.dp.multisite.transfer.transfer_fit`, ε-DP calibrated at λ + η; w₀ is public).
In the simulation w₀ is fitted on half of the reference's training pool and the simulated
private fits draw from the other half only, so the source never saw the rows it is tested
against or trained with (as the real source never sees the private rows).

**Predictor.** Each candidate's accuracy is predicted by simulated fits on a public reference
task (:mod:`service.dp.analysis.auto_simulation`: the reference, the simulated size and the
seeds).

**The decision rule: a public preference order, overturned only by a clear predicted gain.**
The candidates are listed in a fixed order of preference (transfer first when there are public
rows, then :data:`AUTO_MECHANISMS` as listed — ``noisy_gd``, objective perturbation and its
relatives, output perturbation, DP-SGD — the order of the measured accuracies on Adult at
δ > 0 and δ = 0, benchmarks/RESULTS.md), λ increasing. The pick starts at the first scored
candidate; a later one replaces it only when its predicted accuracy is higher on the same
draws by more than max(:data:`MIN_GAIN`, :data:`GAIN_Z` · se), se the standard error of the
paired per-draw differences. The reference is a crude stand-in for the data (a synthetic
task, or a few public rows): with four draws, differences of a point are within its noise, and
an argmax among near-ties picked output perturbation on breast cancer and digits, 5–15 points
below objective perturbation on the real data (and, at z = 2, DP-SGD on digits at ε = 0.1
where every candidate was at chance on the reference).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.dp import MECHANISMS, Calibration, calibrate
from service.dp.analysis.auto_simulation import (
    MAX_SIMULATED_DIMENSION,
    REPEATS,
    TRANSFER,
    Candidate,
    reference_for,
    seed_of,
    simulate,
)
from service.dp.analysis.baseline import warning_threshold
from service.dp.analysis.planning import excess_risk_bound
from service.dp.analysis.projection_rule import projected_regularization
from service.dp.analysis.regularization import AUTO_MECHANISMS as RULE_MECHANISMS
from service.dp.analysis.regularization import auto_regularization

__all__ = [
    "AUTO",
    "AUTO_MECHANISMS",
    "LAMBDA_GRID",
    "AutoChoice",
    "CandidateFigures",
    "Expectation",
    "auto_candidates",
    "choose",
    "clearly_better",
    "expected_accuracy",
]

#: The API name that asks for the choice.
AUTO: Final[str] = "auto"
#: Mechanisms auto considers, in order of preference (module docstring; those not
#: registered are skipped).
AUTO_MECHANISMS: Final[tuple[str, ...]] = (
    "noisy_gd",
    "objective_perturbation",
    "generalized_objective_perturbation",
    "gaussian_objective_perturbation",
    "output_perturbation",
    "dp_sgd",
)
#: A later candidate replaces the pick only when better by more than max(MIN_GAIN, GAIN_Z·se)
#: (module docstring); GAIN_Z ≈ 3.18, Student's t quantile 0.975 at 3 degrees of freedom
#: (:data:`REPEATS` = 4 paired draws; several challengers are compared, so a one-sided 2.5 %
#: level each).
MIN_GAIN: Final[float] = 0.01
GAIN_Z: Final[float] = 3.2
#: Transfer strengths η auto tries (with the request's λ, else :data:`TRANSFER_LAMBDA`).
TRANSFER_STRENGTHS: Final[tuple[float, ...]] = (1e-3, 1e-2, 1e-1)
TRANSFER_LAMBDA: Final[float] = 1e-4
#: λ values auto tries when the request gives none, for a mechanism without an automatic-λ rule
#: (DP-SGD; module docstring, "Candidates").
LAMBDA_GRID: Final[tuple[float, ...]] = (1e-4, 1e-3, 1e-2, 1e-1)


@dataclass(frozen=True, slots=True)
class CandidateFigures:
    """A candidate's predicted figures (or why it was left out)."""

    candidate: Candidate
    accuracies: tuple[float, ...] = ()
    excess_risk_bound: float | None = None
    excluded: str | None = None

    @property
    def mean(self) -> float:
        return float(np.mean(self.accuracies)) if self.accuracies else math.nan

    def to_dict(self) -> dict[str, Any]:
        out = self.candidate.to_dict()
        if self.excluded is not None:
            out["excluded"] = self.excluded
            return out
        acc = np.asarray(self.accuracies)
        out["predicted_accuracy"] = {
            "mean": float(acc.mean()),
            "std": float(acc.std(ddof=1)) if acc.size > 1 else 0.0,
            "p10": float(np.quantile(acc, 0.1)),
            "p90": float(np.quantile(acc, 0.9)),
            "draws": int(acc.size),
        }
        out["excess_risk_bound"] = self.excess_risk_bound
        return out


@dataclass(frozen=True, slots=True)
class Expectation:
    """The expected accuracy band of one fit next to the majority-class baseline."""

    mean: float
    p10: float
    p90: float
    draws: int
    reference: str
    baseline: float | None
    baseline_source: str
    #: sd of a privately estimated baseline (0 for a public one): the warning compares the
    #: mean with its upper bound (:func:`service.dp.analysis.baseline.warning_threshold`).
    baseline_sd: float = 0.0

    @property
    def threshold(self) -> float | None:
        """The accuracy below which the fit is flagged (None without a baseline)."""
        if self.baseline is None:
            return None
        return warning_threshold(self.baseline, self.baseline_sd)

    @property
    def below_baseline(self) -> bool:
        threshold = self.threshold
        return threshold is not None and self.mean < threshold

    def to_dict(self) -> dict[str, Any]:
        return {
            "mean": self.mean,
            "p10": self.p10,
            "p90": self.p90,
            "draws": self.draws,
            "reference": self.reference,
            "majority_baseline": self.baseline,
            "baseline_source": self.baseline_source,
            "baseline_sd": self.baseline_sd,
            "warning_threshold": self.threshold,
        }


@dataclass(frozen=True, slots=True)
class AutoChoice:
    """What auto chose and why: every candidate's predicted figures."""

    chosen: Candidate
    figures: tuple[CandidateFigures, ...]
    reference: str
    simulated_rows: int
    simulated_epsilon: float
    #: The projection rule's record when the pick was projected (module docstring).
    projection: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        best = next(f for f in self.figures if f.candidate == self.chosen)
        out = {
            "chosen": self.chosen.to_dict(),
            "rule": "the first candidate in the order of preference, unless a later one's "
            f"predicted accuracy is higher by more than max({MIN_GAIN:g}, {GAIN_Z:g}·se of the "
            "paired differences)",
            "predicted_accuracy": best.mean,
            "reference": self.reference,
            "simulated_rows": self.simulated_rows,
            "simulated_epsilon": self.simulated_epsilon,
            "candidates": [f.to_dict() for f in self.figures],
        }
        if self.projection is not None:
            out["projection_rule"] = dict(self.projection)
        return out


def _check_dimension(d: int) -> None:
    if d > MAX_SIMULATED_DIMENSION:
        raise ValueError(
            f"auto simulates datasets of at most {MAX_SIMULATED_DIMENSION} encoded features "
            "(this one has more); name a mechanism"
        )


def auto_candidates(
    *,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    regularization: float | None,
    params: Mapping[str, Any] | None = None,
    admissible: Callable[[str, Any], None] | None = None,
    transfer: bool = False,
) -> list[CandidateFigures]:
    """Every candidate (module docstring) with, for those the public inputs exclude, the
    reason. ``params`` are options every mechanism takes (the Huber width ``h``);
    ``admissible(mechanism, calibration)`` may raise ``ValueError`` to exclude more."""
    lambdas = LAMBDA_GRID if regularization is None else (float(regularization),)
    shared = dict(params or {})
    out: list[CandidateFigures] = []
    if transfer:
        lam = TRANSFER_LAMBDA if regularization is None else float(regularization)
        for eta in TRANSFER_STRENGTHS:
            candidate = Candidate.of(TRANSFER, lam, {**shared, "transfer_strength": eta})
            try:
                # transfer is objective perturbation calibrated at strong convexity λ + η
                _admitted(
                    "objective_perturbation",
                    TRANSFER,
                    n=n,
                    d=d,
                    epsilon=epsilon,
                    delta=0.0,
                    loss=loss,
                    regularization=lam + eta,
                    params=shared,
                    admissible=admissible,
                )
            except (ValueError, TypeError, ArithmeticError) as exc:
                out.append(CandidateFigures(candidate, excluded=str(exc)[:300]))
                continue
            out.append(CandidateFigures(candidate))
    for mechanism in AUTO_MECHANISMS:
        if mechanism not in MECHANISMS:
            continue
        for lam in _lambdas(mechanism, lambdas, regularization, n, d, epsilon, delta, loss, shared):
            candidate = Candidate.of(mechanism, lam, shared)
            try:
                calibration = _admitted(
                    mechanism,
                    mechanism,
                    n=n,
                    d=d,
                    epsilon=epsilon,
                    delta=delta,
                    loss=loss,
                    regularization=lam,
                    params=shared,
                    admissible=admissible,
                )
            except (ValueError, TypeError, ArithmeticError) as exc:
                out.append(CandidateFigures(candidate, excluded=str(exc)[:300]))
                continue
            bound = excess_risk_bound(
                mechanism, calibration.details, calibration.expected_noise_norm
            )
            out.append(CandidateFigures(candidate, excess_risk_bound=bound))
    return out


def _admitted(
    mechanism: str,
    label: str,
    *,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    regularization: float,
    params: Mapping[str, Any],
    admissible: Callable[[str, Any], None] | None,
) -> Calibration:
    """One candidate's calibration; raises (ValueError, TypeError, ArithmeticError) when the
    public inputs refuse it or ``admissible(label, calibration)`` does."""
    calibration = calibrate(
        mechanism,
        n=n,
        d=d,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        regularization=regularization,
        **params,
    )
    if admissible is not None:
        admissible(label, calibration)
    return calibration


#: Multiples of the rule's λ auto tries for a mechanism with a rule (when the request gives
#: no λ); mechanisms without a rule try :data:`LAMBDA_GRID`. (Also 0.1 and 10: the reference
#: then chose λ 10× the rule at ε ≤ 0.5 on Adult, at the majority class.)
RULE_MULTIPLES: tuple[float, ...] = (1.0,)
#: Whether the rule replaces the grid (module docstring); False only to measure the grid.
USE_RULE: bool = True


def clearly_better(challenger: Sequence[float], incumbent: Sequence[float]) -> bool:
    """Whether the paired per-draw differences challenger − incumbent have a mean above
    max(:data:`MIN_GAIN`, :data:`GAIN_Z` · their standard error) (module docstring)."""
    diff = np.asarray(challenger, dtype=np.float64) - np.asarray(incumbent, dtype=np.float64)
    se = float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else 0.0
    return float(diff.mean()) > max(MIN_GAIN, GAIN_Z * se)


def _lambdas(
    mechanism: str,
    grid: Sequence[float],
    regularization: float | None,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    params: Mapping[str, Any],
) -> tuple[float, ...]:
    if regularization is not None or not USE_RULE or mechanism not in RULE_MECHANISMS:
        return tuple(grid)
    try:
        rule = auto_regularization(
            mechanism, n=n, d=d, epsilon=epsilon, delta=delta, loss=loss, params=params
        ).regularization
    except ValueError:
        return tuple(grid)  # the calibration below names why the inputs are refused
    return tuple(rule * m for m in RULE_MULTIPLES)


def choose(
    *,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    regularization: float | None,
    params: Mapping[str, Any] | None = None,
    majority: float | None = None,
    public: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
    public_key: str = "",
    admissible: Callable[[str, Any], None] | None = None,
    repeats: int = REPEATS,
) -> AutoChoice:
    """The candidate of the decision rule (module docstring); raises
    ``ValueError`` when the public inputs exclude every candidate. ``public`` is a public
    reference (X, y) of the same spec (``public_key`` identifies it for the cache)."""
    key = (
        n,
        d,
        float(epsilon),
        float(delta),
        loss,
        regularization,
        json.dumps(dict(params or {}), sort_keys=True),
        majority,
        public_key,
        repeats,
    )
    if public is not None and not public_key:
        return _choose(key, public, admissible)
    return _choose_cached(key, _Public.of(public_key, public), admissible)


class _Public:
    """A public reference for the caches: equal and hashed by its key (a dataset id: stored
    datasets never change), carrying its rows."""

    __slots__ = ("key", "rows")

    def __init__(
        self, key: str, rows: tuple[NDArray[np.float64], NDArray[np.float64]] | None
    ) -> None:
        self.key = key
        self.rows = rows

    @classmethod
    def of(cls, key: str, rows: tuple[NDArray[np.float64], NDArray[np.float64]] | None) -> _Public:
        return cls(key if rows is not None else "", rows)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Public) and other.key == self.key


@lru_cache(maxsize=256)
def _choose_cached(
    key: tuple[Any, ...], public: _Public, admissible: Callable[[str, Any], None] | None
) -> AutoChoice:
    return _choose(key, public.rows, admissible)


def _choose(
    key: tuple[Any, ...],
    public: tuple[NDArray[np.float64], NDArray[np.float64]] | None,
    admissible: Callable[[str, Any], None] | None,
) -> AutoChoice:
    n, d, epsilon, delta, loss, regularization, params_json, majority, _, repeats = key
    _check_dimension(d)
    params = json.loads(params_json)
    listed = auto_candidates(
        n=n,
        d=d,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        regularization=regularization,
        params=params,
        admissible=admissible,
        transfer=public is not None,
    )
    runnable = [f.candidate for f in listed if f.excluded is None]
    if not runnable:
        raise ValueError("no single-dataset mechanism accepts these public inputs")
    X, y, reference = reference_for(d, majority, public)

    def simulated(candidates: Sequence[Candidate]) -> tuple[list[Any], int, float]:
        # every call draws the same rows and noise seeds: not the reference's id (index 8),
        # the same public inputs give the same draws
        return simulate(
            candidates,
            X=X,
            y=y,
            n=n,
            epsilon=epsilon,
            delta=delta,
            loss=loss,
            repeats=repeats,
            seed=seed_of("choose", *key[:8], key[9]),
        )

    results, n_sim, eps_sim = simulated(runnable)
    by_candidate = dict(zip(runnable, results, strict=True))
    figures: list[CandidateFigures] = []
    for f in listed:
        if f.excluded is not None:
            figures.append(f)
            continue
        got = by_candidate[f.candidate]
        if isinstance(got, str):
            figures.append(CandidateFigures(f.candidate, excluded=got))
        else:
            figures.append(
                CandidateFigures(f.candidate, accuracies=got, excess_risk_bound=f.excess_risk_bound)
            )
    scored = [f for f in figures if f.excluded is None]
    if not scored:
        raise ValueError("no candidate mechanism could be simulated at these public inputs")
    best = scored[0]
    for f in scored[1:]:
        if clearly_better(f.accuracies, best.accuracies):
            best = f
    projection: dict[str, Any] | None = None
    if regularization is None:
        projected = _projected(
            best.candidate,
            n=n,
            d=d,
            epsilon=epsilon,
            delta=delta,
            loss=loss,
            admissible=admissible,
        )
        if projected is not None:
            candidate, projection, bound = projected
            got = simulated([candidate])[0][0]  # on the same draws as the candidates
            if isinstance(got, str):  # not simulable: the unprojected pick stands
                projection = None
            else:
                best = CandidateFigures(candidate, accuracies=got, excess_risk_bound=bound)
                figures.append(best)
    return AutoChoice(
        chosen=best.candidate,
        figures=tuple(figures),
        reference=reference,
        simulated_rows=n_sim,
        simulated_epsilon=eps_sim,
        projection=projection,
    )


def _projected(
    pick: Candidate,
    *,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    admissible: Callable[[str, Any], None] | None,
) -> tuple[Candidate, dict[str, Any], float | None] | None:
    """The pick with the projection rule's ``projection_dim`` and the automatic λ at d = k
    (:func:`service.dp.analysis.projection_rule.projected_regularization`), or None when the
    rule keeps all d columns, the pick's mechanism has no projection, or the projected
    calibration refuses the inputs."""
    params = pick.params
    if "projection_dim" in params:
        return None
    try:
        found = projected_regularization(
            pick.mechanism, n=n, d=d, epsilon=epsilon, delta=delta, loss=loss, params=params
        )
        if found is None:
            return None
        choice, rule = found
        own = {**params, "projection_dim": choice.dimension}
        calibration = _admitted(
            pick.mechanism,
            pick.mechanism,
            n=n,
            d=d,
            epsilon=epsilon,
            delta=delta,
            loss=loss,
            regularization=rule.regularization,
            params=own,
            admissible=admissible,
        )
    except (ValueError, TypeError, ArithmeticError):
        return None
    record = choice.record()
    record["regularization"] = rule.regularization
    record["unprojected"] = pick.to_dict()
    bound = excess_risk_bound(pick.mechanism, calibration.details, calibration.expected_noise_norm)
    return Candidate.of(pick.mechanism, rule.regularization, own), record, bound


def expected_accuracy(
    candidate: Candidate,
    *,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    majority: float | None,
    baseline_source: str,
    public: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None,
    public_key: str = "",
    repeats: int = REPEATS,
    baseline_sd: float = 0.0,
) -> Expectation:
    """The expected accuracy band (mean, p10–p90 over ``repeats`` simulated fits) of one
    fit, next to the majority baseline (None when unknown; ``baseline_sd`` > 0 when it was
    estimated privately): the same simulation as :func:`choose`, on the same reference."""
    key = (
        n,
        d,
        float(epsilon),
        float(delta),
        loss,
        candidate.mechanism,
        candidate.regularization,
        candidate.params_json,
        majority,
        baseline_source,
        float(baseline_sd),
        public_key,
        repeats,
    )
    if public is not None and not public_key:
        return _expected(key, candidate, public)
    return _expected_cached(key, candidate, _Public.of(public_key, public))


@lru_cache(maxsize=256)
def _expected_cached(key: tuple[Any, ...], candidate: Candidate, public: _Public) -> Expectation:
    return _expected(key, candidate, public.rows)


def _expected(
    key: tuple[Any, ...],
    candidate: Candidate,
    public: tuple[NDArray[np.float64], NDArray[np.float64]] | None,
) -> Expectation:
    n, d, epsilon, delta, loss = key[:5]
    _check_dimension(d)
    majority, baseline_source, baseline_sd, _, repeats = key[-5:]
    X, y, reference = reference_for(d, majority, public)
    (got,), _, _ = simulate(
        [candidate],
        X=X,
        y=y,
        n=n,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        repeats=repeats,
        seed=seed_of("choose", *key[:5]),
    )
    if isinstance(got, str):
        raise ValueError(got)
    acc = np.asarray(got)
    return Expectation(
        mean=float(acc.mean()),
        p10=float(np.quantile(acc, 0.1)),
        p90=float(np.quantile(acc, 0.9)),
        draws=int(acc.size),
        reference=reference,
        baseline=majority,
        baseline_source=baseline_source,
        baseline_sd=baseline_sd,
    )
