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

**Transfer** (only with public reference rows): hypothesis transfer towards the public rows'
own exact model w₀ (:func:`public_source`, λ = :data:`SOURCE_LAMBDA`), i.e. objective
perturbation centred on w₀ with strength η ∈ :data:`TRANSFER_STRENGTHS`
(:func:`service.dp.multisite.transfer.transfer_fit`, ε-DP calibrated at λ + η; w₀ is public).
In the simulation w₀ is fitted on half of the reference's training pool and the simulated
private fits draw from the other half only, so the source never saw the rows it is tested
against or trained with (as the real source never sees the private rows).

**Predictor: simulation on a public reference task.** Each candidate is fitted ``repeats``
times on a reference training sample and scored on a reference test sample; the predicted
accuracy is the mean (and p10–p90 the band). The reference is either

* the site's own *public* reference rows with the same spec (uploaded with
  ``allow_non_private``: their rows are not protected), which the domain passes in, or
* the **synthetic reference** :func:`reference_task`: a fixed, seeded logistic task at the
  request's d with rows on the unit sphere (like PrivFit's preprocessed rows, ‖x‖ = 1) and one
  intercept coordinate, coefficient w₀ = κ·√(d−1)·v for a fixed unit v (so the margin
  κ·√(d−1)·vᵀu has a spread that does not shrink with d) and the intercept set so that the
  majority class has frequency ``majority``. κ = :data:`REFERENCE_SIGNAL` is calibrated on
  Adult (benchmarks/RESULTS.md, "auto"); the held-out check is the breast-cancer set.

**Size.** Fits use n_sim = min(n, :data:`SIMULATED_ROWS`) rows. When n > n_sim the simulation
runs at ε_sim = ε·n/n_sim. Why that is the right scale: every mechanism here perturbs a
quantity whose sensitivity is ∝ 1/n (the minimiser: 2/(nλ); the objective's linear term b/n
with ‖b‖ ∝ 1/ε; the per-step gradient mean of DP-SGD: 2/b), so the coefficient noise depends
on n and ε through nε (output perturbation: E‖b‖ = 2d/(nλε) exactly; objective perturbation
up to the Jacobian term ln(1 + c/(nλ)), itself a function of nλ compared with nε; the Gaussian
ones with σ ∝ √ln(1/δ)/ε up to lower-order terms). DP-SGD's batch size is scaled by n_sim/n so
the number of steps and the noise per step are those of the real run (floored at
:data:`MIN_SIMULATED_BATCH` rows to bound the work: then fewer steps, each less noisy by the
same factor). What the simulation
does not reproduce is the sampling error of n rows (it has that of n_sim): common to all
candidates, it shifts the band, not the ranking.

**Determinism.** The random numbers are seeded by a hash of the public inputs, and every
candidate sees the same training samples (common random numbers), so the choice is
reproducible and the comparison has less variance than independent draws. (Reproducible on one
installation: a different BLAS or thread count can change the solvers' last bits, and so break
a near-tie differently; the choice made at submission is stored in the job and is the one
that runs.)

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

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.dp import MECHANISMS, calibrate
from service.dp import fit as dp_fit
from service.dp.analysis.baseline import warning_threshold
from service.dp.analysis.planning import excess_risk_bound
from service.dp.analysis.regularization import AUTO_MECHANISMS as RULE_MECHANISMS
from service.dp.analysis.regularization import auto_regularization
from service.dp.data.prepared import prepare_design
from service.dp.multisite.transfer import transfer_fit
from service.dp.optimize.solvers import ConvergenceError

__all__ = [
    "AUTO",
    "AUTO_MECHANISMS",
    "LAMBDA_GRID",
    "MAX_SIMULATED_DIMENSION",
    "REFERENCE_SIGNAL",
    "SIMULATED_ROWS",
    "TRANSFER",
    "AutoChoice",
    "Candidate",
    "CandidateFigures",
    "Expectation",
    "auto_candidates",
    "choose",
    "clearly_better",
    "expected_accuracy",
    "majority_fraction",
    "public_source",
    "reference_task",
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
#: Hypothesis transfer towards the public reference's own model (objective perturbation
#: centred on it, :func:`service.dp.multisite.transfer.transfer_fit`): a candidate only when
#: the site has public reference rows.
TRANSFER: Final[str] = "transfer"
#: Transfer strengths η auto tries (with the request's λ, else :data:`TRANSFER_LAMBDA`).
TRANSFER_STRENGTHS: Final[tuple[float, ...]] = (1e-3, 1e-2, 1e-1)
TRANSFER_LAMBDA: Final[float] = 1e-4
#: λ of the non-private source model fitted on the public reference rows.
SOURCE_LAMBDA: Final[float] = 1e-3
#: λ values auto tries when the request gives none (placeholder for automatic λ).
LAMBDA_GRID: Final[tuple[float, ...]] = (1e-4, 1e-3, 1e-2, 1e-1)
#: Rows per simulated fit at most (above, ε is scaled: module docstring).
SIMULATED_ROWS: Final[int] = 2000
#: Rows of the reference test sample.
TEST_ROWS: Final[int] = 2000
#: DP-SGD's simulated batch size at least (module docstring).
MIN_SIMULATED_BATCH: Final[int] = 10
#: The largest d simulated (the work of one choice grows like candidates × repeats × rows × d;
#: above it auto is refused and a fit gets no expected band).
MAX_SIMULATED_DIMENSION: Final[int] = 256
#: Simulated fits per candidate.
REPEATS: Final[int] = 4
#: κ of the synthetic reference (module docstring).
REFERENCE_SIGNAL: Final[float] = 2.0
#: Fraction of the reference rows' norm on the intercept coordinate.
INTERCEPT_WEIGHT: Final[float] = 0.3
_SEED: Final[int] = 28_3


@dataclass(frozen=True, slots=True)
class Candidate:
    """One (mechanism, λ, settings) auto may choose."""

    mechanism: str
    regularization: float
    params_json: str = "{}"

    @classmethod
    def of(
        cls, mechanism: str, regularization: float, params: Mapping[str, Any] | None = None
    ) -> Candidate:
        return cls(mechanism, float(regularization), json.dumps(dict(params or {}), sort_keys=True))

    @property
    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.params_json)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "regularization": self.regularization,
            "params": dict(self.params),
        }


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

    def to_dict(self) -> dict[str, Any]:
        best = next(f for f in self.figures if f.candidate == self.chosen)
        return {
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


def public_source(X: NDArray[np.float64], y: NDArray[np.float64], loss: str) -> NDArray[np.float64]:
    """The source model of a transfer candidate: the exact (non-private) minimiser at λ =
    :data:`SOURCE_LAMBDA` on public rows (their rows are not protected: no budget)."""
    result = dp_fit(X, y, "non_private", epsilon=math.inf, loss=loss, regularization=SOURCE_LAMBDA)
    coef = np.asarray(result.model.to_dict()["coef"], dtype=np.float64)
    return coef


def _check_dimension(d: int) -> None:
    if d > MAX_SIMULATED_DIMENSION:
        raise ValueError(
            f"auto simulates datasets of at most {MAX_SIMULATED_DIMENSION} encoded features "
            "(this one has more); name a mechanism"
        )


def majority_fraction(y: NDArray[np.float64]) -> float:
    """Frequency of the more frequent class of ±1 labels."""
    positive = float(np.mean(np.asarray(y) > 0))
    return max(positive, 1.0 - positive)


def _seed(*parts: object) -> int:
    text = json.dumps([repr(p) for p in parts])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


@lru_cache(maxsize=64)
def reference_task(d: int, majority: float, rows: int) -> tuple[NDArray[np.float64], ...]:
    """The synthetic public reference (module docstring): ``rows`` rows of (X, y), fixed for
    (d, majority, rows). The first column is the intercept coordinate."""
    if d < 1 or rows < 4 or not 0.5 <= majority < 1.0:
        raise ValueError("reference task needs d >= 1, rows >= 4 and 0.5 <= majority < 1")
    rng = np.random.default_rng(_seed("reference", d, majority, rows))
    X = np.empty((rows, d))
    if d == 1:
        X[:, 0] = 1.0
        margin = np.zeros(rows)
    else:
        u = rng.standard_normal((rows, d - 1))
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        v = np.random.default_rng(_seed("direction", d)).standard_normal(d - 1)
        v /= np.linalg.norm(v)
        X[:, 0] = INTERCEPT_WEIGHT
        X[:, 1:] = math.sqrt(1.0 - INTERCEPT_WEIGHT**2) * u
        margin = REFERENCE_SIGNAL * math.sqrt(d - 1) * (u @ v)
    # the intercept b0 with mean σ(margin + b0) = 1 − majority (bisection; σ increasing in b0)
    lo, hi = -50.0, 50.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if np.mean(1.0 / (1.0 + np.exp(-(margin + mid)))) < 1.0 - majority:
            lo = mid
        else:
            hi = mid
    p = 1.0 / (1.0 + np.exp(-(margin + lo)))
    y = np.where(rng.random(rows) < p, 1.0, -1.0)
    X.setflags(write=False)
    y.setflags(write=False)
    return X, y


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
                calibration = calibrate(
                    "objective_perturbation",
                    n=n,
                    d=d,
                    epsilon=epsilon,
                    delta=0.0,
                    loss=loss,
                    regularization=lam + eta,
                    **shared,
                )
                if admissible is not None:
                    admissible(TRANSFER, calibration)
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
                calibration = calibrate(
                    mechanism,
                    n=n,
                    d=d,
                    epsilon=epsilon,
                    delta=delta,
                    loss=loss,
                    regularization=lam,
                    **shared,
                )
                if admissible is not None:
                    admissible(mechanism, calibration)
            except (ValueError, TypeError, ArithmeticError) as exc:
                out.append(CandidateFigures(candidate, excluded=str(exc)[:300]))
                continue
            bound = excess_risk_bound(
                mechanism, calibration.details, calibration.expected_noise_norm
            )
            out.append(CandidateFigures(candidate, excess_risk_bound=bound))
    return out


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


def _simulated_params(candidate: Candidate, n: int, n_sim: int) -> dict[str, Any]:
    params = dict(candidate.params)
    if candidate.mechanism == "dp_sgd" and n_sim < n:
        from service.dp.mechanisms.dp_sgd import DEFAULT_BATCH_SIZE

        batch = int(params.get("batch_size", min(DEFAULT_BATCH_SIZE, n)))
        params["batch_size"] = min(n_sim, max(MIN_SIMULATED_BATCH, round(batch * n_sim / n)))
    return params


def _simulate(
    candidates: Sequence[Candidate],
    *,
    X: NDArray[np.float64],
    y: NDArray[np.float64],
    n: int,
    epsilon: float,
    delta: float,
    loss: str,
    repeats: int,
    seed: int,
) -> tuple[list[tuple[float, ...] | str], int, float]:
    """Accuracies of every candidate on (X, y): the first rows are the test sample, the rest
    the training pool; the same draws for every candidate."""
    test_rows = min(TEST_ROWS, X.shape[0] // 2)
    X_test, y_test = X[:test_rows], y[:test_rows]
    pool = np.arange(test_rows, X.shape[0])
    source: NDArray[np.float64] | None = None
    if any(c.mechanism == TRANSFER for c in candidates):
        # the source model sees rows no simulated private fit draws (the real source is
        # fitted on public rows, never on the private ones)
        half = pool.size // 2
        source = public_source(X[pool[:half]], y[pool[:half]], loss)
        pool = pool[half:]
    n_sim = min(int(n), SIMULATED_ROWS)
    eps_sim = float(epsilon) * n / n_sim
    rng = np.random.default_rng(seed)
    draws = [rng.choice(pool, size=n_sim, replace=n_sim > pool.size) for _ in range(repeats)]
    noise_seeds = [int(s) for s in rng.integers(0, 2**63 - 1, size=repeats)]
    designs = [prepare_design(X[rows], y[rows]) for rows in draws]
    out: list[tuple[float, ...] | str] = []
    for candidate in candidates:
        params = _simulated_params(candidate, n, n_sim)
        accuracies: list[float] = []
        try:
            for design, noise_seed in zip(designs, noise_seeds, strict=True):
                if candidate.mechanism == TRANSFER:
                    assert source is not None
                    result = transfer_fit(
                        design.X,
                        design.y,
                        source,
                        epsilon=eps_sim,
                        transfer_strength=float(params["transfer_strength"]),
                        regularization=candidate.regularization,
                        loss=loss,
                        rng=np.random.default_rng(noise_seed),
                    )
                else:
                    result = dp_fit(
                        design,
                        None,
                        candidate.mechanism,
                        epsilon=eps_sim,
                        delta=delta,
                        loss=loss,
                        regularization=candidate.regularization,
                        rng=np.random.default_rng(noise_seed),
                        **params,
                    )
                scores = result.model.decision_function(X_test)
                accuracies.append(float(np.mean((scores > 0) == (y_test > 0))))
        except (ValueError, ConvergenceError) as exc:  # refused or unsolved: left out
            out.append(f"simulation failed: {type(exc).__name__}")
            continue
        out.append(tuple(accuracies))
    return out, n_sim, eps_sim


def _reference(
    d: int, majority: float | None, public: tuple[NDArray[np.float64], NDArray[np.float64]] | None
) -> tuple[NDArray[np.float64], NDArray[np.float64], str]:
    if public is not None:
        return public[0], public[1], "public_reference_dataset"
    rows = TEST_ROWS + 2 * SIMULATED_ROWS
    X, y = reference_task(d, 0.5 if majority is None else round(majority, 4), rows)
    return X, y, "synthetic"


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
    X, y, reference = _reference(d, majority, public)
    results, n_sim, eps_sim = _simulate(
        runnable,
        X=X,
        y=y,
        n=n,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        repeats=repeats,
        # not the reference's id (index 8): the same public inputs give the same draws
        seed=_seed("choose", *key[:8], key[9]),
    )
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
    return AutoChoice(
        chosen=best.candidate,
        figures=tuple(figures),
        reference=reference,
        simulated_rows=n_sim,
        simulated_epsilon=eps_sim,
    )


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
    X, y, reference = _reference(d, majority, public)
    (got,), _, _ = _simulate(
        [candidate],
        X=X,
        y=y,
        n=n,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        repeats=repeats,
        seed=_seed("choose", *key[:5]),
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
