"""dp_sgd's defaults for K classes: the rule's values by hand, options given are used as
given, the accounting of a given (b, η) does not depend on whether the rule chose it, and
binary fits keep their defaults."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest

from service import dp
from service.dp.core.plan import plan_to_json
from service.dp.mechanisms.dp_sgd import (
    MULTICLASS_RULE,
    DPSGDPlan,
    multiclass_defaults,
    per_step_epsilon,
)

# Adult marital status: n = 30,162 rows, d = 101, K = 7, so D = dK = 707
ADULT: dict[str, Any] = {"n": 30_162, "d": 101, "regularization": 1e-3}


@pytest.mark.parametrize(
    ("n", "dim", "eps", "b"),
    [
        (30_162, 707, 0.1, 7_070),  # 707/0.1 = 7069.99…96 (0.1 as a double is > 0.1): ⌈⌉ = 7070
        (30_162, 707, 0.5, 1_414),  # 707/0.5 = 1414 exactly
        (30_162, 707, 1.0, 707),
        (30_162, 707, 5.0, 142),  # 141.4 rounded up
        (30_162, 707, 100.0, 50),  # 7.07 < 50: never below the binary default
        (1_000, 707, 0.1, 1_000),  # 7070 > n: one update of all rows
        (40, 12, 10.0, 40),  # max(50, 2) = 50 > n = 40
    ],
)
def test_the_rule_by_hand(n: int, dim: int, eps: float, b: int) -> None:
    got_b, eta = multiclass_defaults(n, dim, eps)
    assert got_b == b
    assert eta == math.sqrt(b / 50)
    if b < n:
        # the expected noise norm per update 2D/(b·ε) is ≤ 2, exactly
        assert Fraction(2 * dim) / (b * Fraction(eps)) <= 2
        # and b is the smallest such batch above the binary default
        assert b == 50 or Fraction(2 * dim) / ((b - 1) * Fraction(eps)) > 2


@pytest.mark.parametrize(("n", "dim", "eps"), [(0, 7, 1.0), (10, 0, 1.0), (10, 7, 0.0)])
def test_the_rule_refuses_empty_inputs(n: int, dim: int, eps: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        multiclass_defaults(n, dim, eps)


def test_omitted_options_follow_the_rule_and_the_record_states_it() -> None:
    cal = dp.calibrate("dp_sgd", epsilon=0.5, task="multiclass", n_classes=7, **ADULT)
    det = cal.details
    assert (det["batch_size"], det["batches_per_epoch"], det["epochs"]) == (1_414, 21, 1)
    assert det["eta"] == math.sqrt(1_414 / 50)  # ≈ 5.318
    assert (det["default_batch_size"], det["default_eta"]) == (1_414, det["eta"])
    assert det["defaults_rule"] == MULTICLASS_RULE
    # 21 batches of ⌊30162/21⌋ = 1436 or 1437 rows: E‖z‖ = 2D/(b_min·ε) = 1414/718 ≤ 2
    assert det["min_batch_size"] == 1_436
    assert cal.expected_noise_norm == pytest.approx(1_414 / 718, rel=1e-9)
    assert cal.expected_noise_norm is not None
    assert cal.expected_noise_norm <= 2.0


def test_the_rule_uses_the_budget_of_one_pass() -> None:
    """With E = 3 passes and δ > 0, ε_pass is the per-pass ε of the accounting (advanced
    composition where tighter), and b = ⌈D/ε_pass⌉."""
    eps, delta = 1.0, 1e-6
    eps_pass, _ = per_step_epsilon(eps, 3, delta)
    det = dp.calibrate(
        "dp_sgd", epsilon=eps, delta=delta, epochs=3, task="multiclass", n_classes=7, **ADULT
    ).details
    assert det["epsilon_per_epoch"] == eps_pass
    assert det["batch_size"] == math.ceil(Fraction(707) / Fraction(eps_pass))
    assert det["batch_size"] > 3 * 707  # ε_pass < ε/3 would be basic composition's share


def test_options_given_are_used_as_given() -> None:
    common: dict[str, Any] = {"epsilon": 0.5, "task": "multiclass", "n_classes": 7, **ADULT}
    given_b = dp.calibrate("dp_sgd", batch_size=200, **common).details
    assert (given_b["batch_size"], given_b["eta"]) == (200, 1.0)  # η's rule needs the rule's b
    given_eta = dp.calibrate("dp_sgd", eta=0.25, **common).details
    assert (given_eta["batch_size"], given_eta["eta"]) == (1_414, 0.25)
    constant = dp.calibrate("dp_sgd", schedule="constant", **common).details
    assert (constant["batch_size"], constant["eta"]) == (1_414, 1.0)
    inverse = dp.calibrate("dp_sgd", schedule="inverse", **common).details
    assert (inverse["batch_size"], inverse["eta"]) == (1_414, None)


@pytest.mark.parametrize("eps", [0.1, 1.0, 5.0])
def test_the_accounting_of_the_rules_options_is_that_of_the_same_options_given(
    eps: float,
) -> None:
    common: dict[str, Any] = {"epsilon": eps, "task": "multiclass", "n_classes": 7, **ADULT}
    ruled = dp.calibrate("dp_sgd", **common)
    # the rule sees the ε the mechanism is calibrated with: the ledger's floor of the request
    # (service.dp.core.accounting.ledger_floor), one ulp below the double 0.1 for ε = 0.1
    assert isinstance(ruled.plan, DPSGDPlan)
    eps_pass = ruled.plan.epsilon_per_epoch
    b, eta = multiclass_defaults(ADULT["n"], 707, eps_pass)
    assert b == {0.1: 7_071, 1.0: 707, 5.0: 142}[eps]
    given = dp.calibrate("dp_sgd", batch_size=b, eta=eta, **common)
    assert isinstance(given.plan, DPSGDPlan)
    assert plan_to_json(ruled.plan) == plan_to_json(given.plan)
    assert ruled.details == given.details
    assert (ruled.epsilon, ruled.delta) == (eps, 0.0)
    # β = ε_pass/Δ with Δ = 2/b_min·(1 + float margin), the margin ≈ 2b·2⁻⁵³ small but > 0
    det = ruled.details
    margin = det["float_margin"]
    assert 0.0 < margin < 1e-8
    sensitivity = 2 / det["min_batch_size"] * (1 + margin)
    assert det["beta"] == pytest.approx(eps_pass / sensitivity, rel=1e-12)
    # by hand: ⌊30162/b⌋ batches of at least b_min = ⌊30162/⌊30162/b⌋⌋ rows, β ≈ ε·b_min/2
    b_min = {0.1: 7_540, 1.0: 718, 5.0: 142}[eps]
    assert det["min_batch_size"] == b_min
    assert det["beta"] == pytest.approx(eps * b_min / 2, rel=1e-8)


def test_binary_defaults_and_records_are_unchanged() -> None:
    cal = dp.calibrate("dp_sgd", epsilon=0.1, **ADULT)
    det = cal.details
    assert (det["batch_size"], det["eta"], det["epochs"]) == (50, 1.0, 1)
    assert not {"defaults_rule", "default_batch_size", "default_eta"} & set(det)
    given = dp.calibrate("dp_sgd", epsilon=0.1, batch_size=50, eta=1.0, **ADULT)
    assert isinstance(cal.plan, DPSGDPlan)
    assert isinstance(given.plan, DPSGDPlan)
    assert plan_to_json(cal.plan) == plan_to_json(given.plan)
