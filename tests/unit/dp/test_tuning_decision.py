"""``auto`` selection weighs tuning against the automatic λ
(:func:`service.dp.analysis.selection_choice.tuning_cost_factor`, rule 0 of ``choose_selection``):
the cost factor against a hand computation, the decision on both sides of the threshold, and
what ``tune`` fits and records in each case."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from service.dp.analysis import selection_choice
from service.dp.analysis.regularization import ESTIMATION_WEIGHT, auto_regularization
from service.dp.analysis.repetition import RepetitionResult
from service.dp.analysis.selection import RuleOnlyResult, tune
from service.dp.analysis.selection_choice import (
    AUTOMATIC_LAMBDA,
    MAX_COST_FACTOR,
    choose_selection,
    repetition_plan,
    tuning_cost_factor,
)
from service.dp.core.base import FitResult, LinearModel
from service.dp.data.prepared import PreparedDesign, prepare_design

MECH = "objective_perturbation"


def _choice(
    n: int, d: int, epsilon: float, *, rule: bool = True
) -> selection_choice.SelectionChoice:
    lam = auto_regularization(MECH, n=n, d=d, epsilon=epsilon).regularization
    return choose_selection(
        "auto",
        k=5,
        n=n,
        d=d,
        epsilon=epsilon,
        delta=0.0,
        min_regularization=1e-4,
        repetition_possible=True,
        mechanism=MECH,
        rule_regularization=lam if rule else None,
    )


def test_cost_factor_against_the_hand_computation() -> None:
    """κ² = (2A/n + 4d(d+1)/(n·ε_t)²)/(2A/n + 4d(d+1)/(n·ε)²) for pure runs at ε_t."""
    n, d, eps = 30_162, 106, 1.0
    plan = repetition_plan("liu_talwar", k=5, n=n, epsilon=eps, delta=0.0)
    a = 2.0 * ESTIMATION_WEIGHT / n
    by_hand = math.sqrt(
        (a + 4 * d * (d + 1) / (n * plan.train_epsilon) ** 2)
        / (a + 4 * d * (d + 1) / (n * eps) ** 2)
    )
    got = tuning_cost_factor(MECH, n=n, d=d, epsilon=eps, delta=0.0, plan=plan)
    assert got == pytest.approx(by_hand, rel=1e-12)
    # noise-dominated: κ is the ratio of the budgets, ≥ 3 for Liu–Talwar's 3ε₀
    assert got == pytest.approx(eps / plan.train_epsilon, rel=0.01)
    assert got >= 3.0


def test_cost_factor_of_gaussian_runs() -> None:
    """noisy_gd: m₂ = 8d/μ², so κ² = (2A/n + 8d/(nμ_r)²)/(2A/n + 8d/(nμ)²)."""
    from service.dp.mechanisms.noisy_gd import gdp_mu

    n, d, eps, delta = 30_162, 106, 1.0, 1e-5
    plan = repetition_plan(
        "papernot_steinke", k=3, n=n, epsilon=eps, delta=delta, mechanism="noisy_gd", d=d
    )
    a = 2.0 * ESTIMATION_WEIGHT / n
    mu = gdp_mu(eps, delta)
    by_hand = math.sqrt((a + 8 * d / (n * plan.fit_mu) ** 2) / (a + 8 * d / (n * mu) ** 2))
    got = tuning_cost_factor("noisy_gd", n=n, d=d, epsilon=eps, delta=delta, plan=plan)
    assert got == pytest.approx(by_hand, rel=1e-12)


@pytest.mark.parametrize(
    ("n", "d", "eps"), [(30_162, 106, 0.1), (30_162, 106, 1.0), (398, 31, 1.0)]
)
def test_noise_dominated_requests_fit_the_automatic_lambda(n: int, d: int, eps: float) -> None:
    choice = _choice(n, d, eps)
    assert choice.method == AUTOMATIC_LAMBDA
    assert f"> {MAX_COST_FACTOR:g}" in choice.reason
    # without the rule's λ, auto never declines (the HTTP path's behaviour is unchanged)
    assert _choice(n, d, eps, rule=False).method != AUTOMATIC_LAMBDA


def test_estimation_dominated_requests_still_tune() -> None:
    """n = 10⁶, d = 10, ε = 1: the noise term is small next to 2A/n, κ ≤ 1.5."""
    assert _choice(10**6, 10, 1.0).method in selection_choice.REPETITION_SELECTIONS


def _design(n: int = 200) -> PreparedDesign:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 3))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    return prepare_design(X, y)


def _fit_at(log: list[tuple[float, float]]) -> Callable[[PreparedDesign, float, float], FitResult]:
    def fit_at(full: PreparedDesign, lam: float, eps_t: float) -> FitResult:
        log.append((lam, eps_t))
        return FitResult(
            mechanism=MECH,
            model=LinearModel(coef=np.array([1.0, 0.0, 0.0])),
            epsilon=eps_t,
            delta=0.0,
            details={},
            composition="",
            expected_noise_norm=None,
            seeded=True,
        )

    return fit_at


def _no_part_fit(part: PreparedDesign, lam: float) -> FitResult:
    raise AssertionError("no candidate is fitted on a part here")


def test_tune_fits_the_automatic_lambda_once_at_the_whole_budget() -> None:
    log: list[tuple[float, float]] = []
    out = tune(
        _design(),
        [1e-4, 1e-3, 1e-2],
        epsilon=1.0,
        fit_one=_no_part_fit,
        fit_at=_fit_at(log),
        rng=np.random.default_rng(1),
        method="auto",
        rule_candidate=0.05,
        mechanism=MECH,
    )
    assert isinstance(out, RuleOnlyResult)
    assert log == [(0.05, 1.0)]
    record = out.record(1.0, 0.0)
    assert record["chosen_regularization"] == 0.05
    assert record["epsilon_split"] == {"fit": 1.0, "selection": 0.0, "total": 1.0}
    assert record["candidates"] == [1e-4, 1e-3, 1e-2]
    assert "κ" in record["reason"]


def test_when_tuning_runs_the_automatic_lambda_is_a_candidate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(selection_choice, "MAX_COST_FACTOR", math.inf)
    log: list[tuple[float, float]] = []
    out = tune(
        _design(4000),
        [1e-4, 1e-3],
        epsilon=1.0,
        fit_one=_no_part_fit,
        fit_at=_fit_at(log),
        rng=np.random.default_rng(2),
        method="auto",
        rule_candidate=0.05,
        mechanism=MECH,
    )
    assert isinstance(out, RepetitionResult)
    assert out.candidates == (1e-4, 1e-3, 0.05)
    assert {eps for _, eps in log} == {out.plan.train_epsilon}
    assert out.plan.train_epsilon < 1.0 / 2.5


def test_the_rule_candidate_needs_auto_and_a_rule_mechanism() -> None:
    design = _design()
    for method, mechanism in (("liu_talwar", MECH), ("auto", "output_perturbation"), ("cms", MECH)):
        with pytest.raises(ValueError, match="automatic λ"):
            tune(
                design,
                [1e-3],
                epsilon=1.0,
                fit_one=_no_part_fit,
                fit_at=_fit_at([]),
                rng=None,
                method=method,
                rule_candidate=0.05,
                mechanism=mechanism,
            )
