"""The predictor of ``"mechanism": "auto"`` (issue 28 item 3; docs/design.md §3): simulated
fits of a candidate on a public reference task, from public quantities only. Pure; reads no
private data and spends nothing (:mod:`service.dp.analysis.auto` chooses with it).

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
with ‖b‖ ∝ 1/ε), so the coefficient noise depends on n and ε through nε (output perturbation:
E‖b‖ = 2d/(nλε) exactly; objective perturbation up to the Jacobian term ln(1 + c/(nλ)), itself
a function of nλ compared with nε; the Gaussian ones with σ ∝ √ln(1/δ)/ε up to lower-order
terms). What the simulation does not reproduce is the sampling error of n rows (it has that of
n_sim): common to all candidates, it shifts the band, not the ranking.

**DP-SGD at n** (:func:`simulated_run`). DP-SGD's noise is not a function of nε: it is set per
update by its batch, and its options' defaults depend on n (for K classes
b = min(n, max(50, ⌈dK/ε_pass⌉)) and η = √(b/50), :mod:`service.dp.mechanisms.dp_sgd`). So
the simulation takes the real fit's plan at n (public inputs: n, d, K, ε, δ, λ and the options
given) — its m updates per pass, step sizes η_t and per-update noise norm D/β — and runs n_sim
rows in batches of b_sim = max(:data:`MIN_SIMULATED_BATCH`, round(b·n_sim/n)) rows
(m_sim = ⌊n_sim/b_sim⌋ updates per pass, so k = m/m_sim ≥ 1 real updates per simulated one;
k = 1 up to rounding unless the floor bounds the work). k real updates from about the same
iterate add gradients k·ḡ and independent noises of norm ≈ √k·D/β, with steps η_t each, so one
simulated update takes noise of norm (D/β)/√k and step k·η_t: η_sim = √k·η for
``inverse_sqrt`` (k·η/√t = √k·η/√(t/k)), k·η for ``constant``, and 1/(λ·t/k) already for
``inverse``; the total step length Σ η_t and the accumulated noise Σ η_t²‖z_t‖² ≈ (η D/β)² ln T
are the real run's. The noise is set through ε: ε_pass,sim = √k·β·2/b_min,sim under basic
composition at δ = 0 (a simulation spends nothing; only the noise it draws matters). Before,
binary's b = 50 was scaled for every fit and η left at its binary default, so on Adult marital
status at ε = 0.1 (K = 7) the 4 updates of η = 11.9 and noise norm 1.9 were simulated as 200
of η = 1 and noise norm 94 (benchmarks/RESULTS.md, "The band simulates DP-SGD at n").

**Determinism.** The random numbers are seeded by a hash of the public inputs, and every
candidate sees the same training samples (common random numbers), so the choice is
reproducible and the comparison has less variance than independent draws. (Reproducible on one
installation: a different BLAS or thread count can change the solvers' last bits, and so break
a near-tie differently; the choice made at submission is stored in the job and is the one
that runs.)
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.dp import calibrate
from service.dp import fit as dp_fit
from service.dp.data.prepared import prepare_design
from service.dp.mechanisms.dp_sgd import batch_sizes
from service.dp.multisite.transfer import transfer_fit
from service.dp.optimize.solvers import ConvergenceError

__all__ = [
    "MAX_SIMULATED_DIMENSION",
    "REFERENCE_SIGNAL",
    "SIMULATED_ROWS",
    "TRANSFER",
    "Candidate",
    "SimulatedRun",
    "majority_fraction",
    "public_source",
    "reference_for",
    "reference_task",
    "seed_of",
    "simulate",
    "simulated_run",
]

#: Hypothesis transfer towards the public reference's own model (objective perturbation
#: centred on it, :func:`service.dp.multisite.transfer.transfer_fit`): a candidate only when
#: the site has public reference rows.
TRANSFER: Final[str] = "transfer"
#: λ of the non-private source model fitted on the public reference rows.
SOURCE_LAMBDA: Final[float] = 1e-3
#: Rows per simulated fit at most (above, ε is scaled: module docstring).
SIMULATED_ROWS: Final[int] = 2000
#: Rows of the reference test sample.
TEST_ROWS: Final[int] = 2000
#: DP-SGD's simulated batch size at least: bounds the simulated updates to n_sim/10 (module
#: docstring, "DP-SGD at n").
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


def public_source(X: NDArray[np.float64], y: NDArray[np.float64], loss: str) -> NDArray[np.float64]:
    """The source model of a transfer candidate: the exact (non-private) minimiser at λ =
    :data:`SOURCE_LAMBDA` on public rows (their rows are not protected: no budget)."""
    result = dp_fit(X, y, "non_private", epsilon=math.inf, loss=loss, regularization=SOURCE_LAMBDA)
    coef = np.asarray(result.model.to_dict()["coef"], dtype=np.float64)
    return coef


def majority_fraction(y: NDArray[np.float64]) -> float:
    """Frequency of the more frequent class of ±1 labels."""
    positive = float(np.mean(np.asarray(y) > 0))
    return max(positive, 1.0 - positive)


def seed_of(*parts: object) -> int:
    """A 64-bit seed from a SHA-256 of the public ``parts`` (a quote and its submission agree)."""
    text = json.dumps([repr(p) for p in parts])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


@lru_cache(maxsize=64)
def reference_task(d: int, majority: float, rows: int) -> tuple[NDArray[np.float64], ...]:
    """The synthetic public reference (module docstring): ``rows`` rows of (X, y), fixed for
    (d, majority, rows). The first column is the intercept coordinate."""
    if d < 1 or rows < 4 or not 0.5 <= majority < 1.0:
        raise ValueError("reference task needs d >= 1, rows >= 4 and 0.5 <= majority < 1")
    rng = np.random.default_rng(seed_of("reference", d, majority, rows))
    X = np.empty((rows, d))
    if d == 1:
        X[:, 0] = 1.0
        margin = np.zeros(rows)
    else:
        u = rng.standard_normal((rows, d - 1))
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        v = np.random.default_rng(seed_of("direction", d)).standard_normal(d - 1)
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


@dataclass(frozen=True, slots=True)
class SimulatedRun:
    """How one candidate is simulated on n_sim rows: its options and the (ε, δ) it runs at."""

    params: dict[str, Any]
    epsilon: float
    delta: float


def simulated_run(
    candidate: Candidate,
    *,
    n: int,
    n_sim: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    task: str = "binary",
    n_classes: int = 2,
) -> SimulatedRun:
    """The simulated counterpart of a fit at n rows (module docstring, "Size" and "DP-SGD at
    n"): every mechanism runs at ε·n/n_sim; DP-SGD keeps its real run's updates, step sizes
    and noise (the plan at n, from public inputs only)."""
    params = dict(candidate.params)
    if n_sim >= n:
        return SimulatedRun(params, float(epsilon), float(delta))
    if candidate.mechanism != "dp_sgd":
        return SimulatedRun(params, float(epsilon) * n / n_sim, float(delta))
    # the real fit's plan at n: the batch and η its defaults rule picks (K classes: from n,
    # d, K, ε_pass), its updates per pass m and its per-update noise D/β
    real = calibrate(
        "dp_sgd",
        n=n,
        d=d,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        regularization=candidate.regularization,
        task=task,  # type: ignore[arg-type]
        n_classes=n_classes,
        **params,
    ).details
    batch = min(n_sim, max(MIN_SIMULATED_BATCH, round(int(real["batch_size"]) * n_sim / n)))
    sizes = batch_sizes(n_sim, batch)
    k = int(real["batches_per_epoch"]) / int(sizes.size)  # real updates per simulated one
    # per-update noise D/β_sim = (D/β)/√k: k merged updates add noise of norm ≈ √k·D/β;
    # β_sim = ε_pass,sim·b_min,sim/2 (basic composition over the passes, δ = 0)
    eps_pass = float(real["beta"]) * math.sqrt(k) * 2.0 / int(sizes.min())
    params["batch_size"] = batch
    schedule = str(real["schedule"])
    if schedule == "inverse_sqrt":  # Σ over k updates of η/√t ≈ k·η/√t = (η√k)/√(t/k)
        params["eta"] = float(real["eta"]) * math.sqrt(k)
    elif schedule == "constant":
        params["eta"] = float(real["eta"]) * k
    # "inverse": 1/(λ·t/k) = k/(λt), the k merged steps' sum, already
    return SimulatedRun(params, eps_pass * int(real["epochs"]), 0.0)


def simulate(
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
        accuracies: list[float] = []
        try:
            run = simulated_run(
                candidate,
                n=n,
                n_sim=n_sim,
                d=X.shape[1],
                epsilon=epsilon,
                delta=delta,
                loss=loss,
            )
            params = run.params
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
                        epsilon=run.epsilon,
                        delta=run.delta,
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


def reference_for(
    d: int, majority: float | None, public: tuple[NDArray[np.float64], NDArray[np.float64]] | None
) -> tuple[NDArray[np.float64], NDArray[np.float64], str]:
    """(X, y, its name): the public reference rows when given, else the synthetic reference at d
    and the majority share (0.5 when unknown)."""
    if public is not None:
        return public[0], public[1], "public_reference_dataset"
    rows = TEST_ROWS + 2 * SIMULATED_ROWS
    X, y = reference_task(d, 0.5 if majority is None else round(majority, 4), rows)
    return X, y, "synthetic"
