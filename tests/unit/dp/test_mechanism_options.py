"""Typed mechanism options and capabilities (service.dp.core.options): every registry entry
declares them, the dataclass defaults are what the mechanism really uses, and the planner,
the work estimate and the non-private set read the capabilities (a mechanism added to the
registry is picked up without touching those modules)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from service.dp import MECHANISMS, make_problem
from service.dp.analysis import planning, work
from service.dp.core.options import (
    Capabilities,
    MechanismOptions,
    option,
    option_names,
    option_specs,
)
from service.dp.mechanisms import non_private

#: Each mechanism's own options, written out by hand from its validate_params.
OWN_OPTIONS: dict[str, set[str]] = {
    "non_private": set(),
    "output_perturbation": set(),
    "objective_perturbation": {"projection_dim", "projection_kind", "projection_seed"},
    "gaussian_objective_perturbation": set(),
    "generalized_objective_perturbation": {"kifer_Delta"},
    "dp_sgd": {
        "epochs",
        "batch_size",
        "schedule",
        "eta",
        "radius",
        "projection_dim",
        "projection_kind",
        "projection_seed",
    },
    "noisy_gd": {"iterations", "step_size"},
    "adassp": {"rho"},
    "stacking_samples": {
        "n_models",
        "high_level_fraction",
        "meta_features",
        "high_level_intercept",
        "high_level_regularization",
    },
    "stacking_features": {
        "feature_groups",
        "importance",
        "n_models",
        "high_level_fraction",
        "meta_features",
        "high_level_intercept",
        "high_level_regularization",
    },
}


def test_the_table_covers_the_registry() -> None:
    assert set(OWN_OPTIONS) == set(MECHANISMS)


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_every_mechanism_declares_frozen_documented_options(name: str) -> None:
    mech = MECHANISMS[name]
    options = mech.options
    assert dataclasses.is_dataclass(options)
    assert issubclass(options, MechanismOptions)
    assert options.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert set(option_names(options, own=True)) == OWN_OPTIONS[name]
    assert option_names(options)[0] == "h"  # the loss's option, taken by every mechanism
    for field_name, spec in option_specs(options).items():
        assert spec.doc.strip(), f"{name}.{field_name} has no sentence"
    instance = options()
    with pytest.raises(dataclasses.FrozenInstanceError):
        instance.h = 1.0  # type: ignore[misc]
    assert isinstance(mech.capabilities, Capabilities)


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_the_mechanism_takes_exactly_its_declared_options(name: str) -> None:
    """An option the dataclass does not declare is refused by the mechanism itself."""
    with pytest.raises(ValueError, match="unknown parameter"):
        _problem(name, {"not_an_option": 1})


def _problem(name: str, params: Mapping[str, Any]) -> Any:
    """A problem of the first task the mechanism fits (binary when it fits binary labels)."""
    regression = "binary" not in MECHANISMS[name].capabilities.tasks
    return make_problem(
        name,
        n=200,
        d=4,
        epsilon=1.0,
        delta=1e-6,
        loss="squared" if regression else "logistic",
        regularization=0.01,
        params=params,
        task="regression" if regression else "binary",
    )[1]


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_fixed_defaults_are_the_ones_the_mechanism_uses(name: str) -> None:
    """A value the schema shows as the default equals what validate_params fills in when the
    option is left out."""
    options = MECHANISMS[name].options
    used = _problem(name, {}).params
    checked = 0
    for f in dataclasses.fields(options):
        # None means "not given" (its sentence says what the mechanism does then)
        if f.default is None or f.name not in used:
            continue
        assert used[f.name] == f.default, f"{name}.{f.name}"
        checked += 1
    if name == "dp_sgd":
        assert checked >= 2  # epochs and schedule at least


def test_dp_sgd_defaults_by_hand() -> None:
    from service.dp.mechanisms import dp_sgd

    defaults = dp_sgd.Options()
    assert (defaults.epochs, defaults.schedule, defaults.h) == (1, "inverse_sqrt", 0.5)
    assert defaults.eta is None
    assert defaults.batch_size is None
    specs = option_specs(dp_sgd.Options)
    assert specs["epochs"].bounds() == {"ge": 1, "le": 10_000}
    assert specs["eta"].bounds() == {"gt": 0.0}
    assert specs["batch_size"].computed_default == (
        "min(50, n); for K classes min(n, max(50, ⌈dK/ε_pass⌉)), ε_pass the budget of one pass"
    )
    used = _problem("dp_sgd", {}).params
    assert (used["eta"], used["batch_size"]) == (1.0, 50)


def test_capabilities_by_hand() -> None:
    caps = {name: mech.capabilities for name, mech in MECHANISMS.items()}
    assert {n for n, c in caps.items() if not c.private} == {"non_private"}
    assert {n: c.tunable_options for n, c in caps.items() if c.tunable_options} == {
        "dp_sgd": ("eta",)
    }
    assert {n for n, c in caps.items() if c.has_excess_risk_bound} == {
        "output_perturbation",
        "objective_perturbation",
    }
    assert {n for n, c in caps.items() if c.meta_level} == {
        "output_perturbation",
        "objective_perturbation",
    }
    assert {n for n, c in caps.items() if c.work is not None} == {
        "dp_sgd",
        "noisy_gd",
        "adassp",
        "objective_perturbation",
    }
    assert {n for n, c in caps.items() if "binary" not in c.tasks} == {"adassp"}
    assert {n for n, c in caps.items() if "regression" in c.tasks} == {
        "adassp",
        "non_private",
        "objective_perturbation",
        "output_perturbation",
    }


def test_the_excess_risk_bound_by_hand() -> None:
    # output perturbation: ((c + λ)/2)·(d + 1)/d·E‖b‖² with E‖b‖ the expected noise norm
    details = {"d": 2, "c": 0.25, "regularization": 0.1}
    assert planning.excess_risk_bound("output_perturbation", details, 0.3) == pytest.approx(
        0.35 / 2 * 1.5 * 0.09
    )
    # objective perturbation: the shift E‖b‖/(n(λ + Δ)) and smoothness c + λ + Δ recorded
    details = {**details, "expected_coef_shift_bound": 0.2, "effective_regularization": 0.15}
    assert planning.excess_risk_bound("objective_perturbation", details, 7.0) == pytest.approx(
        0.4 / 2 * 1.5 * 0.04
    )
    assert planning.excess_risk_bound("dp_sgd", details, 0.3) is None
    assert planning.excess_risk_bound("no_such_mechanism", details, 0.3) is None


# ---- a mechanism added to the registry alone -------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class FakeOptions(MechanismOptions):
    """A stand-in mechanism's options."""

    alpha: float = option(0.25, "A fake option.", gt=0.0, lt=1.0)
    rounds: int | None = option(None, "A fake count.", ge=1, computed_default="n")


class _Fake:
    """The exact minimiser under another name, with every capability switched on."""

    name = "fake_mechanism"
    options = FakeOptions
    capabilities = Capabilities(
        tunable_options=("alpha",),
        excess_risk=lambda details, enn: (2.0, 3.0),
        work=lambda n, d, details: 7.0 * n * d,
        meta_level=True,
    )

    def validate_params(self, problem: Any) -> Any:
        return non_private.MECHANISM.validate_params(problem)

    def calibrate(self, problem: Any) -> Any:
        return non_private.MECHANISM.calibrate(problem)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return non_private.MECHANISM.run(*args, **kwargs)


@pytest.fixture
def fake_mechanism() -> Iterator[str]:
    MECHANISMS["fake_mechanism"] = _Fake()
    try:
        yield "fake_mechanism"
    finally:
        del MECHANISMS["fake_mechanism"]


def test_a_new_mechanism_is_planned_and_estimated_from_its_capabilities(
    fake_mechanism: str,
) -> None:
    details = {"d": 3, "c": 0.25, "regularization": 0.1}
    # (smooth/2)·(d + 1)/d·shift² with the fake's (shift, smooth) = (2, 3)
    assert planning.excess_risk_bound(fake_mechanism, details, 1.0) == pytest.approx(
        3.0 / 2 * 4 / 3 * 4.0
    )
    assert fake_mechanism in planning.bound_mechanisms()
    assert work.fit_work(fake_mechanism, 10, 3, {}) == 210.0
    assert work.fit_work("objective_perturbation", 10, 3, {}) == 20 * 10 * 3
