"""Federated protocols of PrivFit: one model from datasets held by different sites.

Each protocol runs the sites' local steps as separate computations over each site's own
rows (a :class:`~service.dp.federated._common.Site` object per dataset is the only holder of
its rows); a coordinator sees only the d-vectors the protocol lets cross. Protocols
(docs/design.md §3, multi-site table):

* ``noisy_average`` — exact local fits averaged at a trusted aggregator plus one noise
  draw (seed 000 §4.4.1 scenario 2): ε-DP per dataset (ε·n_min/n_i for site i); binary,
  multi-class (multinomial loss, noise in dimension dK) and numeric labels (Huber loss).
* ``psgd`` — Rajkumar & Agarwal's multiparty gradient descent (seed 002), every site answer a
  fresh Gaussian release: (ε, δ)-DP per dataset for its whole transcript through zCDP.
* ``admm`` — consensus ADMM over a graph of sites with ``perturbation`` ``"none"``,
  ``"dual"`` (DVP) or ``"primal"`` (PVP) (seed 004), composed over the T iterations; with
  ``noise="gaussian"``, PVP with Gaussian noise: (ε, δ)-DP per dataset through zCDP.
* ``distributed_lasso`` — ISTA/FISTA on shared squared-loss gradients (seed 001, Li et al.);
  not DP without noise, or (ε, δ)-DP with clipped gradients and Gaussian noise (zCDP).

Entry points: :func:`federated_calibrate` (the dry run: public quantities only, no data, no
noise) and :func:`federated_fit`. A calibration carries the protocol's typed, frozen plan
(``FederatedCalibration.plan``; its ``details`` are the record rendered from it), which is
what a run executes; a fit given the plan fixed at submission re-derives it only as a check.
The protocols share one run skeleton (:mod:`.protocol`) and supply their own steps.

Invalid inputs raise ``ValueError``
(:class:`~service.dp.core.validation.PrivacyParameterError`) naming the rule; a failing site step
propagates unchanged (with a note naming the site) and nothing is released; solver
non-convergence raises :class:`~service.dp.optimize.solvers.ConvergenceError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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
from service.dp.core.base import ProgressCallback
from service.dp.core.options import DEFAULT_HUBER_H
from service.dp.core.plan import Plan, PlanMismatchError, require_same_plan
from service.dp.core.tasks import TASKS, Task, check_task
from service.dp.core.validation import (
    PrivacyParameterError,
    check_dimensions,
    check_regularization,
    positive_float_param,
    validate_design,
)
from service.dp.federated import admm, distributed_lasso, noisy_average, psgd
from service.dp.federated._common import (
    FEDERATED_PROTOCOLS,
    FederatedCalibration,
    FederatedProblem,
    FederatedResult,
    FloatArray,
    RoundClock,
)
from service.dp.federated.protocol import FederatedProtocol
from service.dp.mechanisms import multiclass
from service.dp.mechanisms._common import release

__all__ = [
    "FEDERATED_PROTOCOLS",
    "PROTOCOL_TASKS",
    "TASK_REFUSALS",
    "FederatedCalibration",
    "FederatedResult",
    "calibrate_problem",
    "federated_calibrate",
    "federated_fit",
    "make_federated_problem",
    "protocol_losses",
    "protocols_for_task",
]

_PROTOCOLS: dict[str, FederatedProtocol[Any]] = {
    noisy_average.NAME: noisy_average.PROTOCOL,
    psgd.NAME: psgd.PROTOCOL,
    admm.NAME: admm.PROTOCOL,
    distributed_lasso.NAME: distributed_lasso.PROTOCOL,
}

#: Losses each protocol accepts (for a binary label).
_LOSSES: dict[str, tuple[str, ...]] = {
    noisy_average.NAME: ("logistic", "huber"),
    psgd.NAME: ("logistic", "huber"),
    admm.NAME: ("logistic", "huber"),
    distributed_lasso.NAME: ("squared",),
}

#: Losses a protocol accepts for another label task, and why the others are refused.
_TASK_LOSSES: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    (noisy_average.NAME, "multiclass"): (
        ("logistic",),
        "a multi-class label is fitted with the multinomial logistic loss ('logistic')",
    ),
    (noisy_average.NAME, "regression"): (
        ("huber",),
        "a numeric label is fitted with the Huber loss of the residual: the squared loss's "
        "derivative is unbounded, so a site's minimiser has no sensitivity to calibrate to",
    ),
}

#: The label tasks each protocol fits (:mod:`service.dp.core.tasks`). The noisy average's
#: analysis needs only a λ-strongly convex local ERM with an L-Lipschitz loss: the
#: multinomial loss (L = √2, noise in dimension dK) and the Huber loss of a residual (L = h)
#: qualify (:mod:`.noisy_average`, "Other label tasks"). The distributed Lasso is a
#: least-squares method whose binary use already treats y = ±1 as regression targets, and
#: neither its step bound (L = 1 from ‖x‖ ≤ 1) nor the sensitivity of its DP variant (each
#: per-example gradient (vᵀx − y)x is clipped to norm < C whatever y is, so a replaced row
#: moves the sum by < 2C, plus the floating-point margin 2E(n), which depends on n, d and C
#: only) reads y; with y ∈ [−1, 1] the calibration is the binary one.
PROTOCOL_TASKS: dict[str, frozenset[Task]] = {
    noisy_average.NAME: frozenset({"binary", "multiclass", "regression"}),
    psgd.NAME: frozenset({"binary"}),
    admm.NAME: frozenset({"binary"}),
    distributed_lasso.NAME: frozenset({"binary", "regression"}),
}

#: Why a protocol does not fit a task (the refusal's message; docs/design.md, "Studies of
#: multi-class and numeric labels"), by protocol and task: what the protocol's calibration is
#: derived for, and what a (K, d) model or a numeric label would change in it.
TASK_REFUSALS: dict[str, dict[str, str]] = {
    psgd.NAME: {
        "multiclass": "seed 002's answers are d-vectors, sums of l′(y·vᵀx)·y·x for a margin "
        "loss on labels ±1, and their Gaussian noise is calibrated in dimension d; a (K, d) "
        "model's gradients (p − e_y)xᵀ are K × d matrices, outside that protocol",
        "regression": "seed 002's analysis, as implemented, is for answers l′(y·vᵀx)·y·x, "
        "gradients of a margin loss on labels ±1 in dimension d, with a step rule from that "
        "loss's smoothness; a numeric label's gradient ψ(y − vᵀx)·x is another answer, "
        "outside that analysis",
    },
    admm.NAME: {
        "multiclass": "seed 004 derives DVP/PVP for one weight vector per site through the "
        "rank-one Hessian l″(y·wᵀx)·xxᵀ of a margin loss; a multinomial Hessian has rank K − 1 "
        "in dimension dK, outside its analysis",
        "regression": "seed 004 derives DVP/PVP for binary classifiers: one weight vector in "
        "dimension d fitted with a margin loss on labels ±1 (|l′| ≤ 1 and its curvature "
        "bound); the Huber loss of a residual is outside that analysis",
    },
    distributed_lasso.NAME: {
        "multiclass": "it is a least-squares fit of one numeric target; K classes are not one "
        "target",
    },
}


def protocol_losses(protocol: str, task: str) -> tuple[tuple[str, ...], str]:
    """The losses ``protocol`` takes for a label of ``task`` and, when they differ from the
    binary ones, why (the refusal's reason for any other loss)."""
    return _TASK_LOSSES.get((protocol, task), (_LOSSES[protocol], ""))


def protocols_for_task(task: str) -> tuple[str, ...]:
    """The protocols that fit ``task``, by name."""
    return tuple(name for name in FEDERATED_PROTOCOLS if task in PROTOCOL_TASKS[name])


def federated_calibrate(
    protocol: str,
    *,
    site_sizes: Sequence[int],
    d: int,
    epsilon: float,
    delta: float = 0.0,
    loss: str = "logistic",
    regularization: float,
    task: Task = "binary",
    n_classes: int | None = None,
    **params: Any,
) -> FederatedCalibration:
    """Dry run: each dataset's cost and every calibration number, from public quantities.

    ``epsilon``/``delta`` are the total per-dataset budget offered; each site's cost is at
    most that and is what a fit would spend. For the non-private variants (``admm`` with
    ``perturbation="none"``, ``distributed_lasso`` with ``noise=False``) ``epsilon`` is
    ignored, ``private`` is False and the costs are (0, 0). ``task``: what the sites'
    labels hold (:data:`PROTOCOL_TASKS`: a protocol that does not fit it is refused);
    ``n_classes``: K of a ``multiclass`` task (ignored otherwise).
    """
    problem = make_federated_problem(
        protocol,
        site_sizes=site_sizes,
        d=d,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        regularization=regularization,
        params=params,
        task=task,
        n_classes=n_classes,
    )
    return calibrate_problem(problem)


def calibrate_problem(problem: FederatedProblem) -> FederatedCalibration:
    """The protocol's calibration of an already validated :class:`FederatedProblem` (the one
    :func:`federated_fit` uses; a node and the coordinator both compute it).

    The noise is calibrated with the ledger floor of the offered (ε, δ) (issue 19 §4,
    :func:`service.dp.core.accounting.ledger_floor`: the largest doubles ≤ both the request and
    the decimal the ledger charges), and the costs are reported as requested, which is what
    every dataset is charged: a per-site cost equal to the floor is shown as the request
    (conservative), and ``epsilon_calibrated`` / ``delta_calibrated`` record the doubles the
    noise used."""
    calibrate = _PROTOCOLS[problem.protocol].calibrate
    if not math.isfinite(problem.epsilon):  # a non-private variant: nothing is calibrated
        return _with_task(calibrate(problem), problem)
    params = dict(problem.params)
    if isinstance(params.get("delta_prime"), float):  # a share of δ: floored alike (monotone)
        params["delta_prime"] = ledger_floor(params["delta_prime"], unit="delta")
    used = replace(
        problem,
        epsilon=ledger_floor(problem.epsilon, unit="epsilon"),
        delta=ledger_floor(problem.delta, unit="delta"),
        params=params,
    )
    calibration = calibrate(used)
    costs = tuple(
        PrivacyCost(
            epsilon=problem.epsilon if cost.epsilon == used.epsilon else cost.epsilon,
            delta=problem.delta if cost.delta == used.delta else cost.delta,
        )
        for cost in calibration.site_costs
    )
    details = shown_as_requested(
        calibration.details,
        epsilon=(used.epsilon, problem.epsilon),
        delta=(used.delta, problem.delta),
    )
    return _with_task(replace(calibration, site_costs=costs, details=details), problem)


def _with_task(
    calibration: FederatedCalibration, problem: FederatedProblem
) -> FederatedCalibration:
    """The record names a non-binary task (a binary record stays as it was)."""
    if problem.task == "binary":
        return calibration
    details = {**calibration.details, "task": problem.task, "n_classes": problem.n_classes}
    return replace(calibration, details=details)


def federated_fit(
    sites: Sequence[tuple[ArrayLike, ArrayLike]],
    protocol: str,
    *,
    epsilon: float,
    delta: float = 0.0,
    loss: str = "logistic",
    regularization: float,
    rng: np.random.Generator | None = None,
    progress: ProgressCallback | None = None,
    plan: Plan | None = None,
    task: Task = "binary",
    n_classes: int | None = None,
    **params: Any,
) -> FederatedResult:
    """Run ``protocol`` over the sites' (X, y) and return the released model and its record.

    Every site's (X, y) is validated (finite, rows of norm ≤ 1, labels encoded for ``task``:
    ±1, class indices 0…K − 1 for ``multiclass`` with K = ``n_classes``, or in [−1, 1] for
    ``regression``; the same d everywhere). A multi-class fit releases a
    :class:`~service.dp.core.released.MulticlassModel` (K × d). ``progress(fraction)`` is
    called once per communication round and may raise to abort: the exception propagates
    unchanged and nothing is returned. ``rng`` None uses the operating system's CSPRNG; a
    generator marks the result ``seeded``.

    ``plan``: the plan fixed when the fit was accepted (a job's stored plan). The calibration
    is then re-derived here only as a check that must agree
    (:func:`~service.dp.core.plan.require_same_plan`: :class:`PlanMismatchError`, before any
    site step runs, when it does not) and the stored plan is what runs.
    """
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise PrivacyParameterError(
            "rng must be None (operating-system CSPRNG) or a numpy.random.Generator, "
            f"got {type(rng).__name__}"
        )
    _check_protocol_task(protocol, task)
    classes = _check_classes(task, n_classes)
    data = _validate_sites(sites, task, classes)
    problem = make_federated_problem(
        protocol,
        site_sizes=[int(X.shape[0]) for X, _ in data],
        d=int(data[0][0].shape[1]),
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        regularization=regularization,
        params=params,
        task=task,
        n_classes=classes,
    )
    calibration = calibrate_problem(problem)
    if plan is not None:
        if calibration.plan is None:  # pragma: no cover - every protocol returns its plan
            raise PlanMismatchError(f"{problem.protocol}'s calibration carries no plan")
        calibration = replace(calibration, plan=require_same_plan(plan, calibration.plan))
    clock = RoundClock(calibration.rounds, progress)
    coef = _PROTOCOLS[problem.protocol].run(data, problem, calibration, rng=rng, clock=clock)
    model = (
        multiclass.release(coef.reshape(classes, problem.d))
        if task == "multiclass"
        else release(coef)
    )
    return FederatedResult(
        protocol=problem.protocol,
        model=model,
        calibration=calibration,
        seeded=rng is not None,
        rounds_run=len(clock.seconds),
        round_seconds=tuple(clock.seconds),
    )


def make_federated_problem(
    protocol: str,
    *,
    site_sizes: Sequence[int],
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    regularization: float,
    params: Mapping[str, Any],
    task: Task = "binary",
    n_classes: int | None = None,
) -> FederatedProblem:
    """Validate everything that needs no data and build the :class:`FederatedProblem`."""
    _check_protocol_task(protocol, task)
    classes = _check_classes(task, n_classes)
    if isinstance(site_sizes, str | bytes) or not isinstance(site_sizes, Sequence):
        raise PrivacyParameterError("site_sizes must be a sequence of positive integers")
    if len(site_sizes) < 1:
        raise PrivacyParameterError(f"{protocol} needs at least one site")
    sizes = tuple(check_dimensions(n, d)[0] for n in site_sizes)
    _, d = check_dimensions(sizes[0], d)
    allowed, why = protocol_losses(protocol, task)
    if not isinstance(loss, str) or loss not in allowed:
        raise PrivacyParameterError(
            f"{protocol} supports the loss {' or '.join(repr(x) for x in allowed)}"
            + (f" for a {task} label ({why})" if why else "")
            + f", got {loss!r}"
        )
    lam = check_regularization(regularization)
    own = dict(params)
    huber_h = (
        positive_float_param(own, "h", DEFAULT_HUBER_H) if loss == "huber" else DEFAULT_HUBER_H
    )
    if loss == "huber":
        own.pop("h", None)
    if _is_private(protocol, own):
        check_epsilon_delta(epsilon, delta)
        eps, dlt = float(epsilon), float(delta)
    else:
        eps, dlt = math.inf, 0.0
    return FederatedProblem(
        protocol=protocol,
        site_sizes=sizes,
        d=d,
        epsilon=eps,
        delta=dlt,
        loss=loss,
        regularization=lam,
        huber_h=huber_h,
        params=own,
        task=task,
        n_classes=classes,
    )


def _check_protocol_task(protocol: object, task: object) -> None:
    """The protocol is known and fits ``task`` (:data:`PROTOCOL_TASKS`), else a
    :class:`PrivacyParameterError` naming the protocols that do."""
    if not isinstance(protocol, str) or protocol not in _PROTOCOLS:
        raise PrivacyParameterError(
            f"unknown federated protocol {protocol!r}; choose one of "
            + ", ".join(FEDERATED_PROTOCOLS)
        )
    if not isinstance(task, str) or task not in TASKS:
        raise PrivacyParameterError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if task not in PROTOCOL_TASKS[protocol]:
        fitting = protocols_for_task(task)
        raise PrivacyParameterError(
            f"{protocol} does not fit a {task} label: {TASK_REFUSALS[protocol][task]}; "
            + (
                f"the protocols that fit it: {', '.join(fitting)}"
                if fitting
                else "no federated protocol fits it (average the sites' models instead)"
            )
        )


def _check_classes(task: Task, n_classes: object) -> int:
    """K as the DP core counts it (:func:`service.dp.core.tasks.check_task`): 2 for binary,
    1 for regression, the given 3 ≤ K ≤ MAX_CLASSES for multiclass (required)."""
    if task == "multiclass" and n_classes is None:
        raise PrivacyParameterError("a multiclass fit needs n_classes, its number of classes")
    try:
        return check_task(task, 2 if n_classes is None else n_classes)[1]
    except ValueError as exc:
        raise PrivacyParameterError(str(exc)) from exc


def _is_private(protocol: str, params: Mapping[str, Any]) -> bool:
    if protocol == admm.NAME:
        return bool(params.get("perturbation", admm.DEFAULT_PERTURBATION) != "none")
    if protocol == distributed_lasso.NAME:
        return params.get("noise", True) is not False
    return True


def _validate_sites(
    sites: Sequence[tuple[ArrayLike, ArrayLike]], task: Task, n_classes: int
) -> list[tuple[FloatArray, FloatArray]]:
    if isinstance(sites, str | bytes) or not isinstance(sites, Sequence) or len(sites) < 1:
        raise PrivacyParameterError("sites must be a non-empty sequence of (X, y) pairs")
    data: list[tuple[FloatArray, FloatArray]] = []
    for k, pair in enumerate(sites):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise PrivacyParameterError(f"site {k} must be an (X, y) pair")
        try:
            X, y = validate_design(pair[0], pair[1], task, n_classes)
        except ValueError as exc:
            raise PrivacyParameterError(f"site {k}: {exc}") from exc
        if data and X.shape[1] != data[0][0].shape[1]:
            raise PrivacyParameterError(
                f"every site must have the same number of features: site 0 has "
                f"{data[0][0].shape[1]}, site {k} has {X.shape[1]}"
            )
        data.append((X, y))
    return data
