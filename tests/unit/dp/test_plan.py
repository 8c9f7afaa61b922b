"""Every single-dataset mechanism's typed plan (:mod:`service.dp.core.plan`, issue 27 item 1).

* the JSON form is exact: ``plan_from_json(plan_to_json(p)) == p`` through real JSON text, for
  several problems per mechanism (Huber, δ > 0, projections, stacking's nested sub-plans), and
  the record rendered from the rebuilt plan is the calibration's record;
* ``run`` executes the plan: a fit from the JSON-round-tripped plan releases bit-identical
  coefficients to a fit from the original and to a fresh calibration, with the same seed;
* a tampered plan is refused (:func:`require_same_plan` names the field; ``service.dp.fit``
  refuses another mechanism's plan or one made for other inputs);
* the parameters are checked once per fit (``check_common`` in ``validate_params`` only).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import pytest

import service.dp as dp
from service.dp.core.plan import (
    PLAN_KINDS,
    Plan,
    PlanMismatchError,
    plan_from_json,
    plan_kind,
    plan_to_json,
    require_same_plan,
)
from service.dp.mechanisms import (
    MECHANISMS,
    dp_sgd,
    gaussian_objective,
    generalized_objective,
    non_private,
    objective_perturbation,
    output_perturbation,
)
from service.dp.mechanisms._common import Inputs

#: (mechanism, n, d, ε, δ, loss, λ, params) — every mechanism, Huber and δ > 0 among them.
PROBLEMS: list[tuple[str, int, int, float, float, str, float, dict[str, Any]]] = [
    ("non_private", 60, 3, math.inf, 0.0, "logistic", 0.01, {}),
    ("non_private", 60, 3, math.inf, 0.0, "huber", 0.1, {"h": 0.2}),
    ("output_perturbation", 60, 3, 1.0, 0.0, "logistic", 0.01, {}),
    ("output_perturbation", 500, 7, 0.3, 1e-5, "huber", 0.05, {"h": 0.4}),
    ("objective_perturbation", 60, 3, 1.0, 0.0, "logistic", 0.01, {}),
    ("objective_perturbation", 80, 4, 0.2, 0.0, "huber", 1e-3, {"h": 0.5}),
    ("generalized_objective_perturbation", 60, 3, 1.0, 0.0, "logistic", 0.01, {}),
    ("generalized_objective_perturbation", 60, 3, 1.0, 1e-6, "huber", 0.01, {"h": 0.5}),
    ("generalized_objective_perturbation", 90, 2, 0.7, 0.0, "logistic", 0.02, {"kifer_Delta": 3}),
    ("gaussian_objective_perturbation", 60, 3, 1.0, 1e-5, "logistic", 0.01, {}),
    ("gaussian_objective_perturbation", 70, 5, 0.4, 1e-7, "huber", 0.05, {"h": 0.3}),
    ("dp_sgd", 60, 3, 1.0, 0.0, "logistic", 0.01, {"epochs": 2, "batch_size": 10}),
    (
        "dp_sgd",
        60,
        4,
        2.0,
        1e-6,
        "huber",
        0.01,
        {"epochs": 5, "batch_size": 7, "schedule": "inverse", "radius": 3.0, "h": 0.5},
    ),
    (
        "dp_sgd",
        60,
        4,
        1.0,
        0.0,
        "logistic",
        0.01,
        {"batch_size": 6, "projection_dim": 2, "projection_seed": 11},
    ),
    ("dp_sgd", 60, 4, 1.0, 0.0, "logistic", 0.01, {"batch_size": 6, "projection_dim": 2}),
    ("objective_perturbation", 60, 4, 1.0, 0.0, "logistic", 0.01, {"projection_dim": 2}),
    (
        "objective_perturbation",
        60,
        4,
        1.0,
        0.0,
        "huber",
        1e-4,
        {"projection_dim": 3, "projection_kind": "achlioptas", "projection_seed": 5, "h": 0.5},
    ),
    ("noisy_gd", 60, 3, 1.0, 1e-5, "logistic", 0.01, {"iterations": 5}),
    ("noisy_gd", 80, 4, 0.5, 1e-6, "huber", 1e-3, {"h": 0.4, "step_size": "constant"}),
    ("adassp", 60, 3, 1.0, 1e-5, "squared", 1e-3, {"task": "regression"}),
    ("adassp", 90, 4, 0.4, 1e-7, "squared", 1e-2, {"task": "regression", "rho": 0.1}),
    ("non_private", 60, 3, math.inf, 0.0, "squared", 0.01, {"task": "regression"}),
    ("non_private", 60, 3, math.inf, 0.0, "huber", 0.01, {"task": "regression", "h": 0.3}),
    ("objective_perturbation", 70, 3, 0.8, 0.0, "huber", 0.01, {"task": "regression"}),
    ("output_perturbation", 70, 4, 0.8, 0.0, "huber", 0.02, {"task": "regression", "h": 0.7}),
    ("stacking_samples", 80, 3, 1.0, 0.0, "logistic", 0.01, {"n_models": 3}),
    (
        "stacking_features",
        80,
        4,
        1.0,
        0.0,
        "huber",
        0.01,
        {"feature_groups": [[0, 2], [1], [3]], "importance": [0.5, 0.25, 0.25], "h": 0.5},
    ),
]
IDS = [f"{p[0]}-{p[5]}-d{p[2]}-delta{p[4]:g}" for p in PROBLEMS]


def _calibration(case: tuple[Any, ...]) -> dp.Calibration:
    mechanism, n, d, eps, delta, loss, lam, params = case
    return dp.calibrate(
        mechanism, n=n, d=d, epsilon=eps, delta=delta, loss=loss, regularization=lam, **params
    )


def _data(n: int, d: int, seed: int = 3, task: str = "binary") -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1), 1.0)[:, None] * 1.01
    score = X @ np.linspace(2.0, -1.0, d) + 0.3 * rng.standard_normal(n)
    if task == "regression":
        return X, np.clip(0.4 * score, -1.0, 1.0)
    return X, np.where(score > 0, 1.0, -1.0)


def test_every_mechanism_has_its_own_registered_plan_kind() -> None:
    for name in MECHANISMS:
        assert name in PLAN_KINDS
        assert getattr(PLAN_KINDS[name], "mechanism", None) == name
    case_names = {case[0] for case in PROBLEMS}
    assert case_names == set(MECHANISMS)


@pytest.mark.parametrize("case", PROBLEMS, ids=IDS)
def test_the_json_form_is_exact_and_renders_the_same_record(case: tuple[Any, ...]) -> None:
    calibration = _calibration(case)
    plan = calibration.plan
    assert plan is not None
    assert type(plan).kind == case[0]
    text = json.dumps(plan_to_json(plan), allow_nan=False)  # what the job column holds
    again = plan_from_json(json.loads(text))
    assert again == plan
    assert plan_to_json(again) == plan_to_json(plan)
    rendered = again.calibration()  # type: ignore[attr-defined]
    mech = dp.get_mechanism(case[0])
    params = dict(case[7])
    task = params.pop("task", "binary")
    _, problem = dp.make_problem(
        case[0],
        n=case[1],
        d=case[2],
        epsilon=case[3],
        delta=case[4],
        loss=case[5],
        regularization=case[6],
        params=params,
        task=task,
    )
    direct = mech.calibrate(problem)
    assert rendered.details == direct.details
    assert rendered.composition == direct.composition
    assert (rendered.epsilon, rendered.delta) == (direct.epsilon, direct.delta)


@pytest.mark.parametrize("case", PROBLEMS, ids=IDS)
def test_a_run_from_the_stored_plan_is_bit_identical(case: tuple[Any, ...]) -> None:
    mechanism, n, d, eps, delta, loss, lam, params = case
    X, y = _data(n, d, task=params.get("task", "binary"))
    plan = _calibration(case).plan
    assert plan is not None
    stored = plan_from_json(json.loads(json.dumps(plan_to_json(plan))))
    kwargs: dict[str, Any] = {"epsilon": eps, "delta": delta, "loss": loss, "regularization": lam}
    fresh = dp.fit(X, y, mechanism, rng=np.random.default_rng(9), **kwargs, **params)
    original = dp.fit(X, y, mechanism, rng=np.random.default_rng(9), plan=plan, **kwargs, **params)
    rebuilt = dp.fit(X, y, mechanism, rng=np.random.default_rng(9), plan=stored, **kwargs, **params)
    assert json.dumps(rebuilt.model.to_dict()) == json.dumps(original.model.to_dict())
    assert json.dumps(rebuilt.model.to_dict()) == json.dumps(fresh.model.to_dict())
    assert rebuilt.details == fresh.details
    assert (rebuilt.epsilon, rebuilt.delta) == (fresh.epsilon, fresh.delta)
    if mechanism != "non_private":  # the seed matters: another one releases another model
        other = dp.fit(
            X, y, mechanism, rng=np.random.default_rng(10), plan=stored, **kwargs, **params
        )
        assert json.dumps(other.model.to_dict()) != json.dumps(rebuilt.model.to_dict())


def test_a_tampered_plan_is_refused_naming_what_changed() -> None:
    plan = _calibration(PROBLEMS[4]).plan  # objective perturbation
    assert isinstance(plan, objective_perturbation.ObjectivePerturbationPlan)
    assert require_same_plan(plan, plan_from_json(plan_to_json(plan))) == plan
    weaker = dataclasses.replace(plan, beta=2.0 * plan.noise_beta)
    with pytest.raises(PlanMismatchError, match=r"in: beta$"):
        require_same_plan(weaker, plan)
    nested = dataclasses.replace(
        plan, certificate=dataclasses.replace(plan.certificate, beta=plan.certificate.beta * 2)
    )
    with pytest.raises(PlanMismatchError, match=r"in: certificate$"):
        require_same_plan(nested, plan)
    # a tampered JSON form is a different plan once rebuilt
    data = plan_to_json(plan)
    data["inputs"] = {**data["inputs"], "regularization": 0.02}
    with pytest.raises(PlanMismatchError, match="inputs"):
        require_same_plan(plan_from_json(data), plan)
    other = _calibration(PROBLEMS[2]).plan  # output perturbation, same inputs
    assert other is not None
    with pytest.raises(PlanMismatchError, match="its kind"):
        require_same_plan(other, plan)


def test_fit_refuses_a_plan_for_another_mechanism_or_other_inputs() -> None:
    X, y = _data(60, 3)
    plan = _calibration(PROBLEMS[4]).plan  # objective perturbation, n = 60, d = 3, ε = 1
    kwargs: dict[str, Any] = {"epsilon": 1.0, "regularization": 0.01}
    with pytest.raises(PlanMismatchError, match="cannot run"):
        dp.fit(X, y, "output_perturbation", plan=plan, **kwargs)
    with pytest.raises(PlanMismatchError, match="other public inputs"):
        dp.fit(X[:59], y[:59], "objective_perturbation", plan=plan, **kwargs)
    with pytest.raises(PlanMismatchError, match="other public inputs"):
        dp.fit(X, y, "objective_perturbation", plan=plan, epsilon=0.9, regularization=0.01)


def test_run_reads_the_plan_not_the_record() -> None:
    """A record whose numbers are scrambled changes nothing; the plan is what runs."""
    X, y = _data(60, 3)
    calibration = _calibration(PROBLEMS[2])  # output perturbation
    mech = dp.get_mechanism("output_perturbation")
    _, problem = dp.make_problem(
        "output_perturbation",
        n=60,
        d=3,
        epsilon=1.0,
        delta=0.0,
        loss="logistic",
        regularization=0.01,
        params={},
    )
    scrambled = dataclasses.replace(
        calibration,
        details={**calibration.details, "beta": 1e-9, "certificate_tolerance": 1.0},
    )
    a = mech.run(X, y, problem, calibration, rng=np.random.default_rng(4), progress=None)
    b = mech.run(X, y, problem, scrambled, rng=np.random.default_rng(4), progress=None)
    assert np.array_equal(a.coef, b.coef)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="no output_perturbation plan"):
        mech.run(
            X,
            y,
            problem,
            dataclasses.replace(calibration, plan=None),
            rng=np.random.default_rng(4),
            progress=None,
        )


@pytest.mark.parametrize(
    "module",
    [
        non_private,
        output_perturbation,
        objective_perturbation,
        generalized_objective,
        gaussian_objective,
        dp_sgd,
    ],
    ids=lambda m: m.__name__.rsplit(".", 1)[-1],
)
def test_the_parameters_are_checked_once_per_fit(
    monkeypatch: pytest.MonkeyPatch, module: Any
) -> None:
    name = module.MECHANISM.name
    case = next(c for c in PROBLEMS if c[0] == name)
    mechanism, n, d, eps, delta, loss, lam, params = case
    X, y = _data(n, d)
    calls: list[str] = []
    original = module.check_common

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, "check_common", counting)
    dp.fit(
        X,
        y,
        mechanism,
        epsilon=eps,
        delta=delta,
        loss=loss,
        regularization=lam,
        rng=np.random.default_rng(1),
        **params,
    )
    assert calls == [name]


@plan_kind("test_union_fields")
@dataclasses.dataclass(frozen=True, slots=True)
class _UnionFields(Plan):
    number: int | float
    text_or_inf: str | float
    nested_or_tuple: Inputs | tuple[float, ...]
    maybe: int | str | None = None


@pytest.mark.parametrize(
    "plan",
    [
        _UnionFields(number=3, text_or_inf="eps", nested_or_tuple=(1.0, 2.5)),
        _UnionFields(number=3.0, text_or_inf=math.inf, nested_or_tuple=(), maybe=7),
        _UnionFields(
            number=-0.5,
            text_or_inf=0.25,
            nested_or_tuple=Inputs(
                n=10,
                d=2,
                epsilon=1.0,
                delta=0.0,
                loss="logistic",
                huber_h=0.5,
                c=0.25,
                regularization=0.1,
            ),
            maybe="x",
        ),
    ],
)
def test_fields_typed_with_a_multi_type_union_round_trip(plan: _UnionFields) -> None:
    back = plan_from_json(json.loads(json.dumps(plan_to_json(plan))))
    assert back == plan
    assert type(back.number) is type(plan.number)
    assert type(back.text_or_inf) is type(plan.text_or_inf)
