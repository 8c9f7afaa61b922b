"""What a federated fit's record shows every member depends on no site's row count (docs/design.md
§2: no party learns another site's dataset size): for each protocol, two fits with the same public
terms over sites of different sizes show exactly the same calibration, while the full calibration
(kept inside PrivFit) does differ between them."""

from __future__ import annotations

from typing import Any

import pytest

from service.domain.records.federated import public_calibration
from service.dp.federated import calibrate_problem, make_federated_problem

CASES: list[tuple[str, dict[str, Any]]] = [
    ("noisy_average", {"delta": 0.0, "loss": "logistic", "params": {}}),
    ("psgd", {"delta": 1e-6, "loss": "logistic", "params": {"iterations": 20}}),
    ("admm", {"delta": 0.0, "loss": "logistic", "params": {"perturbation": "dual"}}),
    ("admm", {"delta": 0.0, "loss": "logistic", "params": {"perturbation": "primal"}}),
    (
        "admm",
        {
            "delta": 1e-6,
            "loss": "logistic",
            "params": {"perturbation": "primal", "noise": "gaussian"},
        },
    ),
    ("distributed_lasso", {"delta": 1e-6, "loss": "squared", "params": {}}),
    # the label tasks' noisy average (its public task, classes and noise dimension)
    (
        "noisy_average",
        {"delta": 0.0, "loss": "logistic", "params": {}, "task": "multiclass", "n_classes": 4},
    ),
    ("noisy_average", {"delta": 0.0, "loss": "huber", "params": {}, "task": "regression"}),
    ("distributed_lasso", {"delta": 1e-6, "loss": "squared", "params": {}, "task": "regression"}),
]


def _calibration(protocol: str, sizes: tuple[int, ...], terms: dict[str, Any]) -> Any:
    return calibrate_problem(
        make_federated_problem(
            protocol, site_sizes=sizes, d=5, epsilon=1.0, regularization=0.01, **terms
        )
    )


@pytest.mark.parametrize(
    ("protocol", "terms"), CASES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(CASES)]
)
def test_the_shown_calibration_does_not_depend_on_the_sites_sizes(
    protocol: str, terms: dict[str, Any]
) -> None:
    small = _calibration(protocol, (300, 500, 700), terms)
    large = _calibration(protocol, (3_000, 50_000, 9_000), terms)
    assert small.details != large.details  # the sizes do enter the calibration ...
    assert public_calibration(small) == public_calibration(large)  # ... but not what is shown
