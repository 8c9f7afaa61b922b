"""Pieces shared by the federated protocols (not part of the public API).

* :class:`FederatedProblem`: the public inputs of one federated fit (site sizes, d, ε, δ,
  loss, λ, protocol options). Site sizes are public to the mechanism (replace-one
  neighbours), as n is for the single-dataset mechanisms.
* :class:`FederatedCalibration` / :class:`FederatedResult`: what ``federated_calibrate`` and
  ``federated_fit`` return.
* :class:`Site`: the computation of one dataset. It is the only object that holds that
  dataset's rows; a protocol's coordinator receives site objects typed by a protocol-specific
  ``Protocol`` (the messages it may ask for) and only ever sees the d-vectors the sites send
  back through :meth:`Site._send`, which refuses anything else.
* :class:`RoundClock`: per-round wall times and the progress callback (which may raise to
  cancel; the exception propagates unchanged and nothing is released).
* :func:`site_round`: one round's step on every site at once (a round costs the slowest
  site's step, not the sum of them), results in site order.
"""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from service.dp.core.accounting import PrivacyCost
from service.dp.core.base import LinearModel, ProgressCallback
from service.dp.core.losses import Loss, get_loss
from service.dp.core.plan import Plan
from service.dp.core.released import MulticlassModel
from service.dp.core.tasks import Task
from service.dp.core.validation import PrivacyParameterError
from service.dp.optimize.solvers import ConvergenceError

__all__ = [
    "FEDERATED_PROTOCOLS",
    "FederatedCalibration",
    "FederatedProblem",
    "FederatedResult",
    "FloatArray",
    "RoundClock",
    "Site",
    "bool_param",
    "choice_param",
    "exactly",
    "finite",
    "int_param",
    "site_call",
    "site_generators",
    "site_round",
]

FloatArray = NDArray[np.float64]

#: The federated protocols of docs/design.md §3 (multi-site table), by API name.
FEDERATED_PROTOCOLS: tuple[str, ...] = ("noisy_average", "psgd", "admm", "distributed_lasso")

T = TypeVar("T")


class _Indexed(Protocol):
    """What :func:`site_round` needs of a party: its public position in the site list."""

    @property
    def index(self) -> int: ...


P = TypeVar("P", bound=_Indexed)


@dataclass(frozen=True, slots=True)
class FederatedProblem:
    """Validated public inputs of one federated fit.

    ``epsilon`` is ∞ (and ``delta`` 0) for a non-private variant; ``params`` holds the
    protocol's own options (``h`` already taken out as ``huber_h``).
    """

    protocol: str
    site_sizes: tuple[int, ...]
    d: int
    epsilon: float
    delta: float
    loss: str
    regularization: float
    huber_h: float
    params: Mapping[str, Any] = field(default_factory=dict)
    #: What the sites' labels hold (:mod:`service.dp.core.tasks`): ``binary`` (y = ±1) or,
    #: for the protocols that fit it, ``multiclass`` (y ∈ {0, …, K − 1}) or ``regression``
    #: (y ∈ [−1, 1]).
    task: Task = "binary"
    #: K as the DP core counts it: 2 (binary), the number of classes (multiclass), 1
    #: (regression).
    n_classes: int = 2

    @property
    def sites(self) -> int:
        """K, the number of sites."""
        return len(self.site_sizes)

    @property
    def total(self) -> int:
        """N = Σ_k n_k."""
        return sum(self.site_sizes)

    def loss_object(self) -> Loss:
        return get_loss(self.loss, h=self.huber_h)


@dataclass(frozen=True)
class FederatedCalibration:
    """What a federated fit spends on each dataset and how it randomises.

    ``site_costs[k]`` is the (ε, δ) charged to site k's dataset (in site order), never more
    than the (ε, δ) offered; for a non-private variant it is (0, 0) — nothing is charged
    because no guarantee is claimed — and ``private`` is False. ``details`` holds every
    calibration number under the papers' names (JSON-safe: str, bool, int, finite float,
    None, lists and dicts of those); per-site numbers, which include the public site sizes,
    are under ``details["sites"]``. ``composition`` says how each per-dataset total arises,
    ``rounds`` is the number of communication rounds, ``notes`` the assumptions the privacy
    record must state. ``plan`` is the protocol's typed, frozen plan
    (:mod:`service.dp.core.plan`): what a run executes; ``details`` is its record (rendered from
    it, ε and δ shown as requested) and is never read back by a run.
    """

    protocol: str
    site_costs: tuple[PrivacyCost, ...]
    private: bool
    details: Mapping[str, Any]
    composition: str
    rounds: int
    notes: tuple[str, ...] = ()
    plan: Plan | None = None

    @property
    def guarantee(self) -> str:
        """Short human statement of the per-dataset guarantee."""
        if not self.private:
            return "no differential privacy"
        return "; ".join(f"site {k}: {cost}" for k, cost in enumerate(self.site_costs))


@dataclass(frozen=True)
class FederatedResult:
    """A released federated model. ``coef`` has been rounded to the release grid;
    ``round_seconds`` are the wall times of the rounds (for benchmarks; not data-dependent
    beyond what the service's own timing reveals, keep them internal)."""

    protocol: str
    #: K × d for a multi-class fit (``noisy_average``), one weight vector otherwise
    model: LinearModel | MulticlassModel
    calibration: FederatedCalibration
    seeded: bool
    rounds_run: int
    round_seconds: tuple[float, ...]

    @property
    def coef(self) -> FloatArray:
        return self.model.coef


class Site:
    """One dataset's side of a protocol: the only holder of that dataset's rows.

    ``index`` (position in the site list), ``n`` and ``d`` are public. Subclasses add the
    protocol's local steps; every vector that leaves a site goes through :meth:`_send`.
    """

    def __init__(self, index: int, X: FloatArray, y: FloatArray) -> None:
        self.index = index
        self.n = int(X.shape[0])
        self.d = int(X.shape[1])
        self._X = X
        self._y = y

    def _send(self, vector: FloatArray, dimension: int | None = None) -> FloatArray:
        """The message a site returns: a fresh, finite float64 vector of length ``dimension``
        (default d; d·K for a multi-class model sent as vec C) and nothing else."""
        length = self.d if dimension is None else dimension
        out = np.array(vector, dtype=np.float64, copy=True)
        if out.shape != (length,):
            raise ValueError(f"site {self.index} may only send a vector of length {length}")
        if not bool(np.all(np.isfinite(out))):
            raise ConvergenceError(
                f"site {self.index}'s local step produced a non-finite vector; nothing was released"
            )
        return out


def site_call(index: int, step: Callable[[], T]) -> T:
    """Run one site's local step; an exception propagates unchanged (the whole job fails and
    nothing is released) with a note naming the site (never data)."""
    try:
        return step()
    except Exception as exc:
        exc.add_note(f"raised in the local step of site {index}")
        raise


def site_round(sites: Sequence[P], step: Callable[[int, P], T]) -> list[T]:
    """``[step(k, site) for k, site in enumerate(sites)]``, with every site's step running at
    once: one thread per site, so a round costs about the slowest site's step rather than the
    sum of them (a local site computes in numpy, which releases the GIL; a party on a node
    waits for the node's answer).

    The results are those of calling the sites in turn, whatever order the threads run in: a
    step reads only the round's public inputs and its own site's state, and draws its noise
    from its own site's stream (:func:`site_generators`); two steps of one round never touch
    the same site. Callers combine the answers in site order after the round, so every
    floating-point sum keeps its order. Each step runs in a copy of the caller's context
    variables (e.g. the prepared design being fitted). Every step is waited for; if any
    raised, the exception of the first site (in site order) that raised propagates with
    :func:`site_call`'s note, and nothing is released.
    """
    calls = [partial(site_call, site.index, partial(step, k, site)) for k, site in enumerate(sites)]
    if len(calls) <= 1:
        return [call() for call in calls]
    with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="privfit-site") as pool:
        # each step sees the caller's context variables, as it would on the caller's thread
        futures = [pool.submit(contextvars.copy_context().run, call) for call in calls]
    # leaving the pool waited for every step
    for future in futures:
        error = future.exception()
        if error is not None:
            raise error
    return [future.result() for future in futures]


def site_generators(
    rng: np.random.Generator | None, sites: int
) -> list[np.random.Generator | None]:
    """One noise stream per site: ``rng.spawn(K)`` (numpy's independent child streams of the
    job's generator), or the CSPRNG (None) for every site when ``rng`` is None.

    Each site draws its noise from its own stream, so a site that runs on its own node (issue
    15) and is handed the job's seed in test mode draws exactly what the same site draws in
    the in-process fit: ``np.random.default_rng(seed).spawn(K)[k]``. The streams are
    independent, so the noise of different sites is independent as the analyses require.
    """
    if rng is None:
        return [None] * sites
    return list(rng.spawn(sites))


#: Reported progress of a federated protocol moves in steps of 1/PROGRESS_STEPS only.
PROGRESS_STEPS = 4


def quantised_progress(rounds_done: int, rounds: int) -> float:
    """⌊S·t/T⌋/S for S = :data:`PROGRESS_STEPS`: the visible progress after t of T rounds.

    T is public (chosen before any data is read), so the reported value is a function of public
    quantities and the round index only; what it can no longer show is the per-round pace of
    the sites' non-private local solves, except at S coarse steps (docs/privacy.md).
    """
    t = min(max(rounds_done, 0), rounds)
    return math.floor(PROGRESS_STEPS * t / rounds) / PROGRESS_STEPS


class RoundClock:
    """Times rounds; after each round calls ``progress`` (which may raise to cancel) with the
    quantised fraction :func:`quantised_progress` (t + 1, T)."""

    def __init__(self, rounds: int, progress: ProgressCallback | None) -> None:
        self.rounds = rounds
        self.progress = progress
        self.seconds: list[float] = []
        self._start = time.perf_counter()

    def tick(self) -> None:
        now = time.perf_counter()
        self.seconds.append(now - self._start)
        if self.progress is not None:
            self.progress(quantised_progress(len(self.seconds), self.rounds))
        self._start = time.perf_counter()


# ------------------------------------------------------------------------- parameter helpers


def int_param(
    params: Mapping[str, Any], name: str, default: int, *, minimum: int, maximum: int
) -> int:
    """``params[name]`` (or ``default``) as an integer in [minimum, maximum]."""
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise PrivacyParameterError(f"{name} must be an integer, got {type(value).__name__}")
    if not minimum <= int(value) <= maximum:
        raise PrivacyParameterError(
            f"{name} must be an integer between {minimum} and {maximum}, got {int(value)}"
        )
    return int(value)


def choice_param(params: Mapping[str, Any], name: str, default: str, choices: Sequence[str]) -> str:
    """``params[name]`` (or ``default``), one of ``choices``."""
    value = params.get(name, default)
    if not isinstance(value, str) or value not in choices:
        raise PrivacyParameterError(
            f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}"
        )
    return value


def bool_param(params: Mapping[str, Any], name: str, default: bool) -> bool:
    """``params[name]`` (or ``default``) as a bool (only True/False are accepted)."""
    value = params.get(name, default)
    if not isinstance(value, bool | np.bool_):
        raise PrivacyParameterError(f"{name} must be true or false, got {value!r}")
    return bool(value)


def exactly(points: list[FloatArray], count: int) -> list[FloatArray]:
    """``points`` when a step got exactly ``count`` public vectors (``ValueError`` otherwise)."""
    if len(points) != count:
        raise ValueError(f"this step takes {count} public vectors, got {len(points)}")
    return points


def finite(value: float) -> float:
    """A float for ``details``; refuses ∞/NaN so the mapping stays JSON-safe."""
    out = float(value)
    if not math.isfinite(out):
        raise ValueError("calibration numbers must be finite")
    return out
