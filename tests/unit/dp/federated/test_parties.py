"""The per-party steps a node runs (issue 15) reproduce the in-process federated fit.

Each party is driven the way a node drives it: built by ``local_party`` over its own rows, its
steps invoked by ``perform_step`` with only the public vectors a coordinator would send and its
own noise stream ``site_generator(seed, k, K)``; the coordinator is the protocol's own
``run_parties``. With the same seed the released model equals ``federated_fit``'s exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from service.dp.federated import calibrate_problem, federated_fit, make_federated_problem
from service.dp.federated._common import FloatArray, RoundClock
from service.dp.federated.parties import (
    STEPS,
    local_party,
    perform_step,
    run_parties,
    site_generator,
)
from service.dp.mechanisms._common import release


class NodeLikeParty:
    """Forwards each protocol call as (step, public vectors) to ``perform_step``; ignores the
    calibrated numbers and the generator the coordinator passes, as a node does."""

    def __init__(self, site: Any, problem: Any, calibration: Any, rng: Any) -> None:
        self.index = site.index
        self._args = (site, problem, calibration)
        self._rng = rng
        self.steps: list[str] = []

    def _run(self, step: str, vectors: list[FloatArray]) -> Any:
        self.steps.append(step)
        site, problem, calibration = self._args
        return perform_step(site, problem, calibration, step, vectors, self._rng)

    def noisy_gradient(self, w: FloatArray, *_: Any) -> Any:
        return self._run("noisy_gradient", [w])

    def local_step(self, neighbours: list[FloatArray], **_: Any) -> Any:
        return self._run("local_step", list(neighbours))

    def dual_update(self, neighbours: list[FloatArray]) -> None:
        self._run("dual_update", list(neighbours))

    def gradient_sum(self, w: FloatArray, **_: Any) -> Any:
        return self._run("gradient_sum", [w])


def _sites(seed: int) -> list[tuple[FloatArray, FloatArray]]:
    rng = np.random.default_rng(seed)
    out = []
    for n in (60, 75, 90):
        X = rng.normal(size=(n, 4))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
        y = np.where(X @ np.array([1.0, -1.0, 0.5, 0.0]) + 0.1 * rng.normal(size=n) > 0, 1.0, -1.0)
        out.append((X, y))
    return out


CASES = [
    ("psgd", "logistic", {"epsilon": 1.0, "delta": 1e-5}, {"iterations": 15}),
    ("admm", "logistic", {"epsilon": 1.0}, {"perturbation": "dual", "iterations": 5}),
    ("admm", "logistic", {"epsilon": 1.0}, {"perturbation": "primal", "iterations": 5}),
    ("distributed_lasso", "squared", {"epsilon": 1.0, "delta": 1e-5}, {"iterations": 15}),
]


@pytest.mark.parametrize(("protocol", "loss", "budget", "params"), CASES)
def test_node_steps_release_the_in_process_model(
    protocol: str, loss: str, budget: dict[str, float], params: dict[str, Any]
) -> None:
    data = _sites(3)
    seed = 987654321
    expected = federated_fit(
        data,
        protocol,
        loss=loss,
        regularization=0.05,
        rng=np.random.default_rng(seed),
        epsilon=budget["epsilon"],
        delta=budget.get("delta", 0.0),
        **params,
    )
    problem = make_federated_problem(
        protocol,
        site_sizes=[len(y) for _, y in data],
        d=4,
        loss=loss,
        regularization=0.05,
        epsilon=budget["epsilon"],
        delta=budget.get("delta", 0.0),
        params=params,
    )
    calibration = calibrate_problem(problem)
    parties = [
        NodeLikeParty(
            local_party(problem, calibration, k, X, y),
            problem,
            calibration,
            site_generator(seed, k, len(data)),
        )
        for k, (X, y) in enumerate(data)
    ]
    coef = run_parties(
        parties,
        problem,
        calibration,
        # the parties draw from their own streams; the coordinator's own draws (psgd's release
        # noise) come from the job's stream, as in process (spawning the parties' streams
        # does not advance it)
        rng=np.random.default_rng(seed),
        clock=RoundClock(calibration.rounds, None),
    )
    np.testing.assert_allclose(release(coef).coef, expected.coef, rtol=0, atol=1e-9)
    assert all(set(p.steps) <= set(STEPS[protocol]) for p in parties)


def test_a_step_refuses_inputs_of_the_wrong_shape() -> None:
    data = _sites(4)
    problem = make_federated_problem(
        "distributed_lasso",
        site_sizes=[len(y) for _, y in data],
        d=4,
        loss="squared",
        regularization=0.05,
        epsilon=1.0,
        delta=1e-5,
        params={},
    )
    calibration = calibrate_problem(problem)
    site = local_party(problem, calibration, 0, *data[0])
    with pytest.raises(ValueError, match="4 finite numbers"):
        perform_step(site, problem, calibration, "gradient_sum", [np.zeros(3)], None)
    with pytest.raises(ValueError, match="no step"):
        perform_step(site, problem, calibration, "noisy_gradient", [np.zeros(4)], None)
