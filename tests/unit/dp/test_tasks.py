"""The three tasks of the DP core: the public (task, K) pair, label encodings, and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from service import dp
from service.dp.core.tasks import check_labels, check_task


def test_check_task_normalises_and_refuses() -> None:
    assert check_task("binary", 2) == ("binary", 2)
    assert check_task("multiclass", 7) == ("multiclass", 7)
    assert check_task("regression", 99) == ("regression", 1)
    for task, k, rule in [
        ("binary", 3, "exactly 2"),
        ("multiclass", 2, "3 to"),
        ("multiclass", 1001, "3 to"),
        ("multiclass", True, "integer"),
        ("ordinal", 3, "unknown task"),
    ]:
        with pytest.raises(ValueError, match=rule):
            check_task(task, k)


@pytest.mark.parametrize(
    ("task", "k", "good", "bad"),
    [
        ("binary", 2, [1, -1, 1], [1, 0, 2]),
        ("multiclass", 4, [0, 3, 2.0], [0, 4, 1.5]),
        ("regression", 1, [-1, 0.25, 1], [1.5, np.nan, -2]),
    ],
)
def test_labels_follow_the_task_encoding(task, k, good, bad) -> None:  # type: ignore[no-untyped-def]
    assert check_labels(np.array(good), 3, task, k).dtype == np.float64
    with pytest.raises(ValueError, match=r"y must contain .*; (2|3) entries do not") as info:
        check_labels(np.array(bad, dtype=float), 3, task, k)
    assert "1.5" not in str(info.value)  # the rule and a count, never a value


def test_a_binary_only_mechanism_refuses_other_tasks_before_reading_data() -> None:
    with pytest.raises(dp.PrivacyParameterError, match="does not fit regression labels"):
        dp.calibrate(
            "gaussian_objective_perturbation",
            n=100,
            d=3,
            epsilon=1.0,
            delta=1e-6,
            loss="squared",
            regularization=0.1,
            task="regression",
        )


def test_a_prepared_design_keeps_the_task_it_was_checked_for() -> None:
    X = np.full((6, 2), 0.5)
    design = dp.prepare_design(X, np.array([0, 1, 2, 0, 1, 2]), "multiclass", 3)
    assert (design.task, design.n_classes) == ("multiclass", 3)
    with pytest.raises(dp.PrivacyParameterError, match="checked for a multiclass task"):
        dp.fit(design, None, "non_private", epsilon=1.0, regularization=0.1)


def test_a_mechanism_that_does_not_fit_the_task_is_refused_before_the_labels_are_read() -> None:
    # labels that break the regression encoding: a refusal naming the task, not the labels,
    # shows the mechanism was checked first
    X = np.full((4, 2), 0.5)
    with pytest.raises(dp.PrivacyParameterError, match="does not fit regression labels"):
        dp.fit(
            X,
            np.array([5.0, 7.0, 9.0, 2.0]),
            "dp_sgd",
            epsilon=1.0,
            regularization=0.1,
            task="regression",
            loss="squared",
        )
