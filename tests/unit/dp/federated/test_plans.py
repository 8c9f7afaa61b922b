"""The federated protocols' typed plans (issue 27, items 1 and 2).

Every protocol's ``calibrate`` returns a frozen, registered plan; its JSON form round-trips
exactly (through ``json.dumps``/``loads``, as the job column and the node wire carry it); the
calibration's ``details`` are the record rendered from the plan; a run reads the plan only (a
record changed after calibration changes nothing); a run of the round-tripped plan releases
exactly what the original releases with the same seed; a fit given a plan that differs from
its own derivation refuses before any site step.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest

from service.dp.core.plan import PLAN_KINDS, Plan, PlanMismatchError, plan_from_json, plan_to_json
from service.dp.federated import (
    FederatedCalibration,
    admm,
    distributed_lasso,
    federated_fit,
    make_federated_problem,
    noisy_average,
    psgd,
)
from service.dp.federated._common import RoundClock
from service.dp.federated.protocol import plan_of
from tests.unit.dp.federated._data import make_sites

SIZES = (40, 55, 70)
D = 3

#: (protocol, loss, ε, δ, params, plan class) for every variant
CASES: list[tuple[str, str, float, float, dict[str, Any], type[Plan]]] = [
    ("noisy_average", "logistic", 1.0, 0.0, {}, noisy_average.NoisyAveragePlan),
    ("noisy_average", "huber", 0.7, 0.0, {"h": 0.3}, noisy_average.NoisyAveragePlan),
    ("psgd", "logistic", 1.0, 1e-5, {"iterations": 6}, psgd.PSGDPlan),
    (
        "psgd",
        "huber",
        0.5,
        1e-6,
        {"iterations": 5, "step_size": "decreasing", "zcdp_conversion": "bun_steinke"},
        psgd.PSGDPlan,
    ),
    ("admm", "logistic", 1.0, 0.0, {"perturbation": "dual", "iterations": 3}, admm.ADMMPlan),
    (
        "admm",
        "logistic",
        1.0,
        1e-5,
        {"perturbation": "dual", "iterations": 3, "delta_prime": 1e-6, "topology": "ring"},
        admm.ADMMPlan,
    ),
    ("admm", "huber", 2.0, 0.0, {"perturbation": "primal", "iterations": 3}, admm.ADMMPlan),
    ("admm", "logistic", 1.0, 1e-5, {"noise": "gaussian", "iterations": 3}, admm.ADMMPlan),
    ("admm", "logistic", 1.0, 0.0, {"perturbation": "none", "iterations": 3}, admm.ADMMPlan),
    ("distributed_lasso", "squared", 1.0, 1e-5, {"iterations": 5}, distributed_lasso.LassoPlan),
    (
        "distributed_lasso",
        "squared",
        1.0,
        0.0,
        {"iterations": 5, "noise": False},
        distributed_lasso.LassoPlan,
    ),
]
IDS = [
    "noisy_average",
    "noisy_average-huber",
    "psgd",
    "psgd-decreasing-bun_steinke",
    "admm-dual",
    "admm-dual-advanced",
    "admm-primal",
    "admm-gaussian",
    "admm-none",
    "lasso",
    "lasso-no-noise",
]
MODULES: dict[str, Any] = {
    "noisy_average": noisy_average,
    "psgd": psgd,
    "admm": admm,
    "distributed_lasso": distributed_lasso,
}


def _calibration(case: tuple[Any, ...]) -> tuple[Any, FederatedCalibration]:
    protocol, loss, eps, delta, params, _ = case
    problem = make_federated_problem(
        protocol,
        site_sizes=SIZES,
        d=D,
        epsilon=eps,
        delta=delta,
        loss=loss,
        regularization=0.05,
        params=params,
    )
    return problem, MODULES[protocol].calibrate(problem)


def _fit(case: tuple[Any, ...], seed: int, **extra: Any) -> Any:
    protocol, loss, eps, delta, params, _ = case
    return federated_fit(
        make_sites(SIZES, D, seed=4),
        protocol,
        epsilon=eps,
        delta=delta,
        loss=loss,
        regularization=0.05,
        rng=np.random.default_rng(seed),
        **params,
        **extra,
    )


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_protocol_plan_round_trips_exactly_and_renders_the_record(
    case: tuple[Any, ...],
) -> None:
    _, cal = _calibration(case)
    plan = cal.plan
    assert plan is not None
    assert type(plan) is case[-1]
    assert PLAN_KINDS[type(plan).kind] is case[-1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.d = 7  # type: ignore[attr-defined]
    wire = json.loads(json.dumps(plan_to_json(plan), allow_nan=False))
    again = plan_from_json(wire)
    assert again == plan
    assert type(again) is type(plan)
    assert plan_to_json(again) == plan_to_json(plan)
    # the record is rendered from the plan: the round-tripped plan renders the same one
    assert again.record() == cal.details  # type: ignore[attr-defined]
    # one site entry per site, and the per-site numbers the run uses are the plan's
    assert len(cal.details["sites"]) == len(SIZES)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_run_of_the_round_tripped_plan_releases_what_the_original_releases(
    case: tuple[Any, ...],
) -> None:
    first = _fit(case, seed=11)
    plan = first.calibration.plan
    again = _fit(case, seed=11, plan=plan_from_json(json.loads(json.dumps(plan_to_json(plan)))))
    np.testing.assert_array_equal(first.coef, again.coef)
    assert again.calibration.plan == plan
    assert again.calibration.details == first.calibration.details


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_run_reads_the_plan_not_the_record(case: tuple[Any, ...]) -> None:
    """The record with every per-site number and the protocol's noise scale blanked: the run
    is unchanged (it never reads ``details``)."""
    problem, cal = _calibration(case)
    blank: dict[str, Any] = {
        "sites": [{} for _ in SIZES],
        "sigma": None,
        "beta": None,
        "penalty": None,
    }
    tampered = dataclasses.replace(cal, details={**cal.details, **blank})
    module = MODULES[case[0]]
    data = make_sites(SIZES, D, seed=4)

    def run(calibration: FederatedCalibration) -> Any:
        clock = RoundClock(calibration.rounds, None)
        return module.run(data, problem, calibration, rng=np.random.default_rng(3), clock=clock)

    np.testing.assert_array_equal(run(cal), run(tampered))


def _halved_noise(plan: Any) -> Any:
    """The plan with less noise at site 0 (the noisy average: a larger β; a variant without
    noise: another of its numbers)."""
    if isinstance(plan, noisy_average.NoisyAveragePlan):
        return dataclasses.replace(plan, beta=2.0 * plan.beta)
    if not plan.sites:  # the Lasso without noise
        return dataclasses.replace(plan, iterations=plan.iterations + 1)
    sites = list(plan.sites)
    first = sites[0]
    if getattr(first, "sigma", None) is not None:
        sites[0] = dataclasses.replace(first, sigma=0.5 * first.sigma)
    elif getattr(first, "zeta", None) is not None:
        sites[0] = dataclasses.replace(first, zeta=2.0 * first.zeta)
    else:  # ADMM without perturbation
        return dataclasses.replace(plan, penalty=2.0 * plan.penalty)
    return dataclasses.replace(plan, sites=tuple(sites))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_fit_refuses_a_plan_that_differs_from_its_own_before_any_site_step(
    case: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, cal = _calibration(case)
    changed = _halved_noise(cal.plan)
    assert changed != cal.plan

    def no_step(*_: Any, **__: Any) -> Any:
        raise AssertionError("a site step ran")

    for site, step in (
        (noisy_average.NoisyAverageSite, "local_minimiser"),
        (psgd.PSGDSite, "noisy_gradient"),
        (admm.ADMMSite, "local_step"),
        (distributed_lasso.LassoSite, "gradient_sum"),
    ):
        monkeypatch.setattr(site, step, no_step)
    with pytest.raises(PlanMismatchError, match="differs"):
        _fit(case, seed=0, plan=changed)
    other = next(c for c in CASES if c[-1] is not case[-1])
    _, foreign = _calibration(other)
    with pytest.raises(PlanMismatchError, match="its kind"):
        _fit(case, seed=0, plan=foreign.plan)


def test_a_run_refuses_a_calibration_without_its_plan() -> None:
    problem, cal = _calibration(CASES[2])
    with pytest.raises(ValueError, match=r"must carry its federated\.psgd plan"):
        psgd.run(
            make_sites(SIZES, D, seed=4),
            problem,
            dataclasses.replace(cal, plan=None),
            rng=None,
            clock=RoundClock(cal.rounds, None),
        )
    _, other = _calibration(CASES[0])
    with pytest.raises(ValueError, match="NoisyAveragePlan"):
        plan_of(dataclasses.replace(cal, plan=other.plan), psgd.PSGDPlan)
