"""ADMM's local solves start from the site's own previous solution (issue 25 §6), under the
same proved stopping test: the first round starts from zero, every later round from what the
same site solved in the round before, for dual and primal perturbation."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from service.dp.federated import federated_fit
from service.dp.optimize import certified

from ._data import make_sites


@pytest.mark.parametrize(
    ("perturbation", "solver"), [("dual", "release_minimiser"), ("primal", "certified_solve")]
)
def test_each_local_solve_starts_from_the_sites_previous_solution(
    monkeypatch: pytest.MonkeyPatch, perturbation: str, solver: str
) -> None:
    original = getattr(certified, solver)
    calls: list[tuple[int, Any, Any]] = []

    def recording(X: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(X, *args, **kwargs)
        calls.append((int(X.shape[0]), kwargs.get("initial"), np.array(out, copy=True)))
        return out

    monkeypatch.setattr(certified, solver, recording)
    sizes = (70, 80, 90)  # a site is known by its row count
    rounds = 3
    federated_fit(
        make_sites(sizes, 4, seed=8),
        "admm",
        epsilon=3.0,
        regularization=0.05,
        rng=np.random.default_rng(9),
        perturbation=perturbation,
        iterations=rounds,
    )
    assert len(calls) == rounds * len(sizes)
    for n in sizes:
        own = [(start, solved) for size, start, solved in calls if size == n]
        assert own[0][0] is None
        for (_, before), (start, _) in itertools.pairwise(own):
            np.testing.assert_array_equal(start, before)
