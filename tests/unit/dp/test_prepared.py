"""A prepared design: checked once, fitted many times, same results as ``fit(X, y)``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import service.dp as dp
from service.dp.data.prepared import active_design, using


def _data(n: int = 2_000, d: int = 20, seed: int = 0) -> tuple[NDArray[Any], NDArray[Any]]:
    """Rows of norm ≤ 1, labels ±1; n·d large enough for the solver's float32 phase."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


CASES = [
    ("objective_perturbation", 0.5, 0.0, {}),
    ("output_perturbation", 0.5, 0.0, {}),
    ("gaussian_objective_perturbation", 0.5, 1e-6, {}),
    ("dp_sgd", 0.5, 0.0, {"epochs": 1, "batch_size": 50}),
    ("non_private", 1.0, 0.0, {}),
]


@pytest.mark.parametrize(("mechanism", "epsilon", "delta", "params"), CASES)
def test_a_prepared_design_fits_bit_for_bit_like_the_arrays(
    mechanism: str, epsilon: float, delta: float, params: dict[str, Any]
) -> None:
    X, y = _data()
    design = dp.prepare_design(X, y)
    for seed in (1, 2):  # the second fit reuses what the first one derived
        kwargs: dict[str, Any] = {"epsilon": epsilon, "delta": delta, "regularization": 1e-3}
        plain = dp.fit(X, y, mechanism, rng=np.random.default_rng(seed), **kwargs, **params)
        prepared = dp.fit(
            design, None, mechanism, rng=np.random.default_rng(seed), **kwargs, **params
        )
        assert prepared.model.to_dict() == plain.model.to_dict()
        assert prepared.epsilon == plain.epsilon
        assert prepared.delta == plain.delta
        assert prepared.details == plain.details


def test_the_solver_keeps_its_float32_copy_on_the_design() -> None:
    X, y = _data()
    design = dp.prepare_design(X, y)
    before = design.nbytes
    dp.fit(design, None, "objective_perturbation", epsilon=1.0, regularization=1e-3)
    grown = design.nbytes
    # X32 (half of X), y32, Xᵀy and every 8th row of X32
    assert grown - before >= X.nbytes // 2
    dp.fit(design, None, "objective_perturbation", epsilon=1.0, regularization=1e-3)
    assert design.nbytes == grown  # made once


def test_a_fit_on_other_arrays_does_not_use_the_active_design() -> None:
    X, y = _data()
    design = dp.prepare_design(X, y)
    with using(design):
        assert active_design(design.X, design.y) is design
        assert active_design(design.X, design.y.reshape(-1)) is design  # a view of the same
        assert active_design(design.X.copy(), design.y) is None
        assert active_design(design.X[:-1], design.y[:-1]) is None
    assert active_design(design.X, design.y) is None  # outside the block


def test_preparing_copies_what_the_caller_could_still_change() -> None:
    X, y = _data(n=50, d=3)
    design = dp.prepare_design(X, y)
    assert design.X is not X
    assert not design.X.flags.writeable
    original = float(X[0, 0])
    X[0, 0] = original / 2  # the caller's array stays writeable and separate
    assert design.X[0, 0] == original
    # rows strictly inside the ball (rows at norm 1 ± rounding are rescaled, hence copied)
    frozen = X * 0.5
    frozen.flags.writeable = False
    assert dp.prepare_design(frozen, y).X is frozen  # read-only and owned: kept as is
    with pytest.raises(ValueError, match="read-only"):
        design.y[0] = 1.0


def test_preparing_checks_like_fit_and_never_quotes_a_value() -> None:
    X, y = _data(n=50, d=3)
    X[4] = [3.25, 0.0, 0.0]
    with pytest.raises(ValueError, match="norm ≤ 1") as excinfo:
        dp.prepare_design(X, y)
    assert "3.25" not in str(excinfo.value)
    X, y = _data(n=50, d=3)
    y[2] = 0.0
    with pytest.raises(ValueError, match="-1 and \\+1"):
        dp.prepare_design(X, y)


def test_labels_go_with_the_design_and_only_there() -> None:
    X, y = _data(n=50, d=3)
    design = dp.prepare_design(X, y)
    with pytest.raises(ValueError, match="y must be None"):
        dp.fit(design, y, "objective_perturbation", epsilon=1.0, regularization=1e-2)
    with pytest.raises(ValueError, match="y is required"):
        dp.fit(X, None, "objective_perturbation", epsilon=1.0, regularization=1e-2)


def test_the_readme_library_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    readme = Path(__file__).resolve().parents[3] / "README.md"
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), re.DOTALL)
    (code,) = [b for b in blocks if "prepare_design(" in b]
    X, y = _data()
    exec(compile(code, str(readme), "exec"), {"X": X, "y": y})
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in printed] == [
        ["0.1", "0.1"],
        ["0.5", "0.5"],
        ["1.0", "1.0"],
    ]
