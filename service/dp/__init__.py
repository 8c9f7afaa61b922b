"""PrivFit's DP core: pure numerics (numpy/scipy only) behind two entry points.

* :func:`fit` validates the data and parameters, calibrates the mechanism, draws its noise
  and solves: it returns a :class:`~service.dp.core.base.FitResult` with the released model, the
  (ε, δ) spent and every calibration number.
* :func:`calibrate` is the dry run: the same calibration from public quantities only
  (n, d, ε, δ, loss, λ, parameters), touching no data and drawing no noise.

Preconditions the privacy proofs rely on are enforced here, never assumed (docs/design.md §2):
X real, finite, every row of L2 norm ≤ 1; y in {−1, +1}; ε finite > 0 and 0 ≤ δ < 1 (except
for ``non_private``); λ > 0. Violations raise ``ValueError`` (:class:`PrivacyParameterError`)
with a message naming the rule, never quoting data values. Non-convergence of the solver
raises :class:`~service.dp.optimize.solvers.ConvergenceError`.

Randomness: with ``rng=None`` every noise draw comes from the operating system's CSPRNG
(:mod:`service.dp.noise.draws`); a ``numpy.random.Generator`` is for tests and explicit test mode,
and the result is then marked ``seeded``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from service.dp.core.accounting import (
    PrivacyCost,
    check_epsilon_delta,
    ledger_floor,
    shown_as_requested,
)
from service.dp.core.base import (
    Calibration,
    FitResult,
    FittedModel,
    LinearModel,
    Mechanism,
    Problem,
    ProgressCallback,
)
from service.dp.core.options import DEFAULT_HUBER_H
from service.dp.core.plan import Plan, PlanMismatchError
from service.dp.core.tasks import TASK_LOSSES, Task, check_task
from service.dp.core.validation import (
    PrivacyParameterError,
    check_dimensions,
    check_regularization,
    positive_float_param,
    validate_design,
)
from service.dp.data import preprocessing, projection
from service.dp.data.prepared import PreparedDesign, prepare_design, using
from service.dp.mechanisms import MECHANISMS, get_mechanism
from service.dp.mechanisms._common import Inputs, MechanismPlan
from service.dp.optimize.solvers import ConvergenceError

__all__ = [
    "MECHANISMS",
    "NON_PRIVATE_MECHANISMS",
    "Calibration",
    "ConvergenceError",
    "FitResult",
    "FittedModel",
    "LinearModel",
    "Mechanism",
    "Plan",
    "PlanMismatchError",
    "PreparedDesign",
    "PrivacyCost",
    "PrivacyParameterError",
    "Problem",
    "as_charged",
    "calibrate",
    "fit",
    "get_mechanism",
    "make_problem",
    "planned",
    "prepare_design",
    "preprocessing",
    "projection",
]

#: Mechanisms that promise no privacy, and so take no (ε, δ) (their records say "no DP"):
#: the registry's entries whose capabilities say so.
NON_PRIVATE_MECHANISMS: frozenset[str] = frozenset(
    name for name, mechanism in MECHANISMS.items() if not mechanism.capabilities.private
)


def fit(
    X: ArrayLike | PreparedDesign,
    y: ArrayLike | None,
    mechanism: str,
    *,
    epsilon: float,
    delta: float = 0.0,
    loss: str = "logistic",
    regularization: float,
    rng: np.random.Generator | None = None,
    progress: ProgressCallback | None = None,
    plan: Plan | None = None,
    task: Task = "binary",
    n_classes: int = 2,
    **params: Any,
) -> FitResult:
    """Fit ``mechanism`` on (X, y) at (ε, δ) and return the released model and its cost.

    ``params`` are the mechanism's own options (``h``, the Huber width, is taken by every
    mechanism when ``loss="huber"``). ``progress`` is called with fractions in [0, 1] and may
    raise to abort. ``rng`` None (production) uses the CSPRNG.

    The result's ``epsilon``/``delta`` are what the mechanism really spends: a pure ε-DP
    mechanism (output or objective perturbation, generalized objective perturbation at
    δ = 0) spends δ = 0 whatever ``delta`` was offered; ``non_private`` reports ε = ∞ and
    ignores ``epsilon``.

    ``task`` and ``n_classes`` say what is predicted and how ``y`` is encoded
    (:mod:`service.dp.core.tasks`): ±1 for ``binary`` (the default), class indices 0…K−1 for
    ``multiclass``, numbers in [−1, 1] for ``regression``; a mechanism that does not fit the
    task is refused (``PrivacyParameterError``) before any data is read.

    ``X`` may be a :class:`PreparedDesign` (then ``y`` is None): the data was checked when it
    was prepared (for the same task) and the solver reuses its working copy across fits
    (:mod:`service.dp.data.prepared`).

    ``plan`` runs a typed plan fixed earlier (the job's, stored at submission;
    :mod:`service.dp.core.plan`) instead of calibrating afresh: the parameters are still
    validated, the plan must be the mechanism's own and hold the same public inputs (n, d,
    ε, δ, loss, λ; otherwise :class:`PlanMismatchError`), and the calibration and record are
    rendered from it. Whether it is the plan these parameters give is the caller's check
    (:func:`~service.dp.core.plan.require_same_plan` against :func:`calibrate`'s ``plan``).
    """
    _check_rng(rng)
    if isinstance(X, PreparedDesign):
        if y is not None:
            raise ValueError("y must be None when X is a PreparedDesign (it holds its labels)")
        if (X.task, X.n_classes) != _checked_task(task, n_classes):
            raise PrivacyParameterError(
                f"the prepared design's labels were checked for a {X.task} task, not {task}"
            )
        Xf, yf, task, n_classes = X.X, X.y, X.task, X.n_classes
        scope: AbstractContextManager[None] = using(X)
    else:
        if y is None:
            raise ValueError("y is required unless X is a PreparedDesign")
        task, n_classes = _checked_task(task, n_classes)
        _require_task(get_mechanism(mechanism), task)  # refused before the labels are read
        Xf, yf = validate_design(X, y, task, n_classes)
        scope = nullcontext()
    with scope:
        return _fit(
            Xf,
            yf,
            mechanism,
            epsilon,
            delta,
            loss,
            regularization,
            rng,
            progress,
            params,
            plan,
            task,
            n_classes,
        )


def _fit(
    Xf: np.ndarray[Any, np.dtype[np.float64]],
    yf: np.ndarray[Any, np.dtype[np.float64]],
    mechanism: str,
    epsilon: float,
    delta: float,
    loss: str,
    regularization: float,
    rng: np.random.Generator | None,
    progress: ProgressCallback | None,
    params: Mapping[str, Any],
    plan: Plan | None = None,
    task: Task = "binary",
    n_classes: int = 2,
) -> FitResult:
    """:func:`fit` on checked float64 arrays."""
    mech, problem = make_problem(
        mechanism,
        n=int(Xf.shape[0]),
        d=int(Xf.shape[1]),
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        regularization=regularization,
        params=params,
        task=task,
        n_classes=n_classes,
    )
    calibration = mech.calibrate(problem) if plan is None else planned(mech, problem, plan)
    model = mech.run(Xf, yf, problem, calibration, rng=rng, progress=progress)
    calibration = as_charged(calibration, problem, epsilon, delta)
    return FitResult(
        mechanism=mech.name,
        model=model,
        epsilon=calibration.epsilon,
        delta=calibration.delta,
        details=calibration.details,
        composition=calibration.composition,
        expected_noise_norm=calibration.expected_noise_norm,
        seeded=rng is not None,
    )


def calibrate(
    mechanism: str,
    *,
    n: int,
    d: int,
    epsilon: float,
    delta: float = 0.0,
    loss: str = "logistic",
    regularization: float,
    task: Task = "binary",
    n_classes: int = 2,
    **params: Any,
) -> Calibration:
    """Dry run: what ``fit`` would spend and how it would randomise, from public quantities."""
    mech, problem = make_problem(
        mechanism,
        n=n,
        d=d,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        regularization=regularization,
        params=params,
        task=task,
        n_classes=n_classes,
    )
    return as_charged(mech.calibrate(problem), problem, epsilon, delta)


def planned(mech: Mechanism, problem: Problem, plan: Plan) -> Calibration:
    """The calibration of a plan fixed earlier, for ``mech`` on the validated ``problem``:
    :class:`PlanMismatchError` unless it is that mechanism's plan for the same public inputs
    (a cheap consistency check, not a re-derivation)."""
    if not isinstance(plan, MechanismPlan) or plan.mechanism != mech.name:
        raise PlanMismatchError(f"a {type(plan).kind} plan cannot run the mechanism {mech.name}")
    if plan.inputs != Inputs.of(problem):
        raise PlanMismatchError(
            f"the {type(plan).kind} plan was made for other public inputs (n, d, ε, δ, loss, λ)"
        )
    return plan.calibration()


def as_charged(
    calibration: Calibration, problem: Problem, epsilon: float, delta: float
) -> Calibration:
    """The calibration as quoted and charged: a mechanism that spends exactly the (ε, δ) it was
    calibrated with (the ledger amounts of :func:`make_problem`) reports the requested values,
    which the ledger charges as the same whole units (issue 19 §4), and so do the details'
    ε (δ) figures equal to them at any depth
    (:func:`~service.dp.core.accounting.shown_as_requested`)
    — conservative, the request is ≥ what was used; ``epsilon_calibrated`` and
    ``delta_calibrated`` record the doubles the noise used."""
    if not get_mechanism(problem.mechanism).capabilities.private:
        return calibration
    eps, dlt = calibration.epsilon, calibration.delta
    if eps == problem.epsilon:
        eps = float(epsilon)
    if dlt == problem.delta:
        dlt = float(delta)
    details = shown_as_requested(
        calibration.details,
        epsilon=(problem.epsilon, float(epsilon)),
        delta=(problem.delta, float(delta)),
    )
    return replace(calibration, epsilon=eps, delta=dlt, details=details)


def make_problem(
    mechanism: str,
    *,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    regularization: float,
    params: Mapping[str, Any],
    task: Task = "binary",
    n_classes: int = 2,
) -> tuple[Mechanism, Problem]:
    """Validate everything that does not need the data and build the :class:`Problem`."""
    mech = get_mechanism(mechanism)
    n, d = check_dimensions(n, d)
    task, n_classes = _checked_task(task, n_classes)
    _require_task(mech, task)
    losses = TASK_LOSSES[task]
    if not isinstance(loss, str) or loss not in losses:
        raise PrivacyParameterError(
            f"unknown loss {loss!r} for a {task} task; choose one of {', '.join(losses)}"
        )
    lam = check_regularization(regularization)
    own = dict(params)
    huber_h = positive_float_param(own, "h", DEFAULT_HUBER_H)
    own.pop("h", None)
    if not mech.capabilities.private:
        eps, dlt = math.inf, 0.0
    else:
        check_epsilon_delta(epsilon, delta)
        # calibrate with the largest doubles ≤ both the request and what the ledger charges
        # (issue 19 §4): the charge ⌈repr(ε)/1e-9⌉·1e-9 is never less than the ε the
        # mechanism's proof uses, and the requested ε it reports is never less either
        eps = ledger_floor(float(epsilon), unit="epsilon")
        dlt = ledger_floor(float(delta), unit="delta")
    problem = Problem(
        mechanism=mech.name,
        n=n,
        d=d,
        epsilon=eps,
        delta=dlt,
        loss=loss,
        regularization=lam,
        huber_h=huber_h,
        params=own,
        task=task,
        n_classes=n_classes,
    )
    return mech, mech.validate_params(problem)


def _require_task(mech: Mechanism, task: Task) -> None:
    """PrivacyParameterError unless ``mech`` fits ``task`` (its capabilities say so)."""
    if task not in mech.capabilities.tasks:
        able = sorted(name for name, m in MECHANISMS.items() if task in m.capabilities.tasks)
        raise PrivacyParameterError(
            f"the mechanism {mech.name} does not fit {task} labels; "
            f"mechanisms that do: {', '.join(able) or 'none yet'}"
        )


def _checked_task(task: object, n_classes: object) -> tuple[Task, int]:
    try:
        return check_task(task, n_classes)
    except ValueError as exc:
        raise PrivacyParameterError(str(exc)) from exc


def _check_rng(rng: object) -> None:
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise PrivacyParameterError(
            "rng must be None (operating-system CSPRNG) or a numpy.random.Generator, "
            f"got {type(rng).__name__}"
        )
