"""Federated protocols of PrivFit: one model from datasets held by different sites.

Each protocol runs the sites' local steps as separate computations over each site's own
rows (a :class:`~service.dp.federated._common.Site` object per dataset is the only holder of
its rows); a coordinator sees only the d-vectors the protocol lets cross. Protocols
(docs/design.md §3, multi-site table):

* ``noisy_average`` — exact local fits averaged at a trusted aggregator plus one noise
  draw (seed 000 §4.4.1 scenario 2): ε-DP per dataset (ε·n_min/n_i for site i).
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
from service.dp.core.plan import Plan, PlanMismatchError, require_same_plan
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
from service.dp.mechanisms._common import release

__all__ = [
    "FEDERATED_PROTOCOLS",
    "FederatedCalibration",
    "FederatedResult",
    "calibrate_problem",
    "federated_calibrate",
    "federated_fit",
    "make_federated_problem",
]

#: Default width of the Huber-smoothed hinge (as ``service.dp.fit``'s ``h``).
DEFAULT_HUBER_H = 0.5

_PROTOCOLS: dict[str, FederatedProtocol[Any]] = {
    noisy_average.NAME: noisy_average.PROTOCOL,
    psgd.NAME: psgd.PROTOCOL,
    admm.NAME: admm.PROTOCOL,
    distributed_lasso.NAME: distributed_lasso.PROTOCOL,
}

#: Losses each protocol accepts.
_LOSSES: dict[str, tuple[str, ...]] = {
    noisy_average.NAME: ("logistic", "huber"),
    psgd.NAME: ("logistic", "huber"),
    admm.NAME: ("logistic", "huber"),
    distributed_lasso.NAME: ("squared",),
}


def federated_calibrate(
    protocol: str,
    *,
    site_sizes: Sequence[int],
    d: int,
    epsilon: float,
    delta: float = 0.0,
    loss: str = "logistic",
    regularization: float,
    **params: Any,
) -> FederatedCalibration:
    """Dry run: each dataset's cost and every calibration number, from public quantities.

    ``epsilon``/``delta`` are the total per-dataset budget offered; each site's cost is at
    most that and is what a fit would spend. For the non-private variants (``admm`` with
    ``perturbation="none"``, ``distributed_lasso`` with ``noise=False``) ``epsilon`` is
    ignored, ``private`` is False and the costs are (0, 0).
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
        return calibrate(problem)
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
    return replace(calibration, site_costs=costs, details=details)


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
    **params: Any,
) -> FederatedResult:
    """Run ``protocol`` over the sites' (X, y) and return the released model and its record.

    Every site's (X, y) is validated (finite, rows of norm ≤ 1, labels ±1, the same d
    everywhere). ``progress(fraction)`` is called once per communication round and may raise
    to abort: the exception propagates unchanged and nothing is returned. ``rng`` None uses
    the operating system's CSPRNG; a generator marks the result ``seeded``.

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
    data = _validate_sites(sites)
    problem = make_federated_problem(
        protocol,
        site_sizes=[int(X.shape[0]) for X, _ in data],
        d=int(data[0][0].shape[1]),
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        regularization=regularization,
        params=params,
    )
    calibration = calibrate_problem(problem)
    if plan is not None:
        if calibration.plan is None:  # pragma: no cover - every protocol returns its plan
            raise PlanMismatchError(f"{problem.protocol}'s calibration carries no plan")
        calibration = replace(calibration, plan=require_same_plan(plan, calibration.plan))
    clock = RoundClock(calibration.rounds, progress)
    coef = _PROTOCOLS[problem.protocol].run(data, problem, calibration, rng=rng, clock=clock)
    return FederatedResult(
        protocol=problem.protocol,
        model=release(coef),
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
) -> FederatedProblem:
    """Validate everything that needs no data and build the :class:`FederatedProblem`."""
    if not isinstance(protocol, str) or protocol not in _PROTOCOLS:
        raise PrivacyParameterError(
            f"unknown federated protocol {protocol!r}; choose one of "
            + ", ".join(FEDERATED_PROTOCOLS)
        )
    if isinstance(site_sizes, str | bytes) or not isinstance(site_sizes, Sequence):
        raise PrivacyParameterError("site_sizes must be a sequence of positive integers")
    if len(site_sizes) < 1:
        raise PrivacyParameterError(f"{protocol} needs at least one site")
    sizes = tuple(check_dimensions(n, d)[0] for n in site_sizes)
    _, d = check_dimensions(sizes[0], d)
    allowed = _LOSSES[protocol]
    if not isinstance(loss, str) or loss not in allowed:
        raise PrivacyParameterError(
            f"{protocol} supports the loss {' or '.join(repr(x) for x in allowed)}, got {loss!r}"
        )
    lam = check_regularization(regularization)
    own = dict(params)
    huber_h = positive_float_param(own, "h", DEFAULT_HUBER_H) if loss == "huber" else 0.5
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
    )


def _is_private(protocol: str, params: Mapping[str, Any]) -> bool:
    if protocol == admm.NAME:
        return bool(params.get("perturbation", admm.DEFAULT_PERTURBATION) != "none")
    if protocol == distributed_lasso.NAME:
        return params.get("noise", True) is not False
    return True


def _validate_sites(
    sites: Sequence[tuple[ArrayLike, ArrayLike]],
) -> list[tuple[FloatArray, FloatArray]]:
    if isinstance(sites, str | bytes) or not isinstance(sites, Sequence) or len(sites) < 1:
        raise PrivacyParameterError("sites must be a non-empty sequence of (X, y) pairs")
    data: list[tuple[FloatArray, FloatArray]] = []
    for k, pair in enumerate(sites):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise PrivacyParameterError(f"site {k} must be an (X, y) pair")
        try:
            X, y = validate_design(pair[0], pair[1])
        except ValueError as exc:
            raise PrivacyParameterError(f"site {k}: {exc}") from exc
        if data and X.shape[1] != data[0][0].shape[1]:
            raise PrivacyParameterError(
                f"every site must have the same number of features: site 0 has "
                f"{data[0][0].shape[1]}, site {k} has {X.shape[1]}"
            )
        data.append((X, y))
    return data
