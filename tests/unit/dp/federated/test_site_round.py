"""One round on every site at once (issue 25 §6): ``site_round`` overlaps the sites' steps,
keeps site order and propagates a site's failure with its note; the coordinators of ADMM,
distributed Lasso and the noisy average run their rounds through it, and a seeded fit releases
the same model as a coordinator that calls its sites one after another.

The overlap tests make every site wait at a ``threading.Barrier`` of all K sites: a sequential
round never gets past the first site (the barrier times out and the round fails).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import pytest

from service.dp.federated import (
    _common,
    admm,
    distributed_lasso,
    federated_fit,
    noisy_average,
)
from service.dp.federated import protocol as skeleton
from service.dp.federated._common import FloatArray, RoundClock, site_round
from service.dp.optimize.solvers import ConvergenceError

from ._data import make_sites

BARRIER_SECONDS = 20.0


class Party:
    def __init__(self, index: int) -> None:
        self.index = index


def test_every_site_runs_at_once() -> None:
    K = 4
    barrier = threading.Barrier(K, timeout=BARRIER_SECONDS)

    def step(k: int, party: Party) -> int:
        barrier.wait()  # every site's step must be running at the same time
        return 10 * k + party.index

    assert site_round([Party(k) for k in range(K)], step) == [0, 11, 22, 33]


def test_results_keep_site_order_whatever_order_the_steps_end_in() -> None:
    K = 5

    ended = [threading.Event() for _ in range(K)]
    order: list[int] = []

    def step(k: int, party: Party) -> tuple[int, int]:
        # the last site ends first: site k waits until site k + 1 has ended
        if k + 1 < K:
            assert ended[k + 1].wait(BARRIER_SECONDS)
        order.append(k)
        ended[k].set()
        return k, party.index

    assert site_round([Party(k) for k in range(K)], step) == [(k, k) for k in range(K)]
    assert order == list(range(K))[::-1]


_CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="none")


def test_every_step_sees_the_callers_context_variables() -> None:
    token = _CALLER.set("job-1")
    try:
        seen = site_round([Party(k) for k in range(3)], lambda k, p: _CALLER.get())
    finally:
        _CALLER.reset(token)
    assert seen == ["job-1"] * 3


def test_one_site_runs_on_the_calling_thread() -> None:
    caller = threading.get_ident()
    assert site_round([Party(0)], lambda k, p: threading.get_ident()) == [caller]
    assert site_round([], lambda k, p: k) == []


def test_a_failure_waits_for_the_round_and_names_the_first_failing_site() -> None:
    K = 4
    barrier = threading.Barrier(K, timeout=BARRIER_SECONDS)
    failing = {1: threading.Event(), 3: threading.Event()}
    finished: list[int] = []

    def step(k: int, party: Party) -> int:
        barrier.wait()
        if k in failing:
            # site 3 fails first, site 1 after it: the error named is still site 1's
            if k == 1:
                assert failing[3].wait(BARRIER_SECONDS)
            failing[k].set()
            raise ConvergenceError(f"step {k} failed")
        # the other sites end only after both failures
        assert all(event.wait(BARRIER_SECONDS) for event in failing.values())
        finished.append(k)
        return k

    with pytest.raises(ConvergenceError, match="step 1 failed") as caught:
        site_round([Party(k) for k in range(K)], step)
    assert "raised in the local step of site 1" in (caught.value.__notes__ or [])
    # the other steps were not abandoned half-way: the round ended before the error surfaced
    assert sorted(finished) == [0, 2]


def _barrier_parties(sites: Sequence[Any], attribute: str, calls: int) -> list[Any]:
    """Wrap each site so that its first ``calls`` calls of ``attribute`` wait for all sites."""
    barrier = threading.Barrier(len(sites), timeout=BARRIER_SECONDS)
    counted = [0]
    lock = threading.Lock()

    class Waiting:
        def __init__(self, site: Any) -> None:
            self._site = site
            self.index = site.index

        def __getattr__(self, name: str) -> Any:
            method = getattr(self._site, name)
            if name != attribute:
                return method

            def wrapped(*args: Any, **kwargs: Any) -> Any:
                with lock:
                    counted[0] += 1
                    wait = counted[0] <= calls
                if wait:
                    barrier.wait()
                return method(*args, **kwargs)

            return wrapped

    return [Waiting(site) for site in sites]


def _sequential(
    monkeypatch: pytest.MonkeyPatch, modules: Sequence[Any]
) -> Callable[[Sequence[Any], Callable[[int, Any], Any]], list[Any]]:
    """Replace site_round in the coordinators by the one-site-after-another loop."""

    def in_turn(sites: Sequence[Any], step: Callable[[int, Any], Any]) -> list[Any]:
        return [_common.site_call(s.index, partial(step, k, s)) for k, s in enumerate(sites)]

    for module in modules:
        monkeypatch.setattr(module, "site_round", in_turn)
    return in_turn


def _data(K: int, seed: int = 3) -> list[tuple[FloatArray, FloatArray]]:
    return make_sites(tuple(80 + 10 * k for k in range(K)), 4, seed)


def test_admm_rounds_overlap_the_sites() -> None:
    data = _data(3)
    problem = federated_problem("admm", data, params={"perturbation": "primal", "iterations": 2})
    calibration = admm.calibrate(problem)
    sites = [admm.party(problem, calibration, k, X, y) for k, (X, y) in enumerate(data)]
    # both rounds' local steps and dual updates wait for all three sites
    for attribute in ("local_step", "dual_update"):
        waiting = _barrier_parties(sites, attribute, calls=6)
        coef = admm.run_parties(
            waiting,
            problem,
            calibration,
            rng=np.random.default_rng(5),
            clock=RoundClock(calibration.rounds, None),
        )
        assert np.all(np.isfinite(coef))


def test_lasso_rounds_overlap_the_sites() -> None:
    data = _data(3)
    problem = federated_problem("distributed_lasso", data, params={"iterations": 3}, loss="squared")
    calibration = distributed_lasso.calibrate(problem)
    sites = [
        distributed_lasso.party(problem, calibration, k, X, y) for k, (X, y) in enumerate(data)
    ]
    coef = distributed_lasso.run_parties(
        _barrier_parties(sites, "gradient_sum", calls=9),
        problem,
        calibration,
        rng=np.random.default_rng(5),
        clock=RoundClock(calibration.rounds, None),
    )
    assert np.all(np.isfinite(coef))


def test_noisy_average_fits_the_sites_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    barrier = threading.Barrier(3, timeout=BARRIER_SECONDS)
    fit = noisy_average.NoisyAverageSite.local_minimiser

    def waiting(self: Any, *args: Any) -> Any:
        barrier.wait()
        return fit(self, *args)

    monkeypatch.setattr(noisy_average.NoisyAverageSite, "local_minimiser", waiting)
    result = federated_fit(_data(3), "noisy_average", epsilon=1.0, regularization=0.1)
    assert np.all(np.isfinite(result.coef))


@pytest.mark.parametrize(
    ("protocol", "loss", "params"),
    [
        ("admm", "logistic", {"perturbation": "dual", "iterations": 3}),
        ("admm", "logistic", {"perturbation": "primal", "iterations": 3}),
        ("admm", "huber", {"noise": "gaussian", "iterations": 3}),
        ("distributed_lasso", "squared", {"iterations": 5}),
        ("noisy_average", "logistic", {}),
    ],
)
def test_a_parallel_round_releases_what_sites_in_turn_release(
    monkeypatch: pytest.MonkeyPatch, protocol: str, loss: str, params: dict[str, Any]
) -> None:
    data = _data(3, seed=11)
    delta = 1e-6 if protocol == "distributed_lasso" or params.get("noise") == "gaussian" else 0.0

    def fit() -> FloatArray:
        return federated_fit(
            data,
            protocol,
            epsilon=2.0,
            delta=delta,
            loss=loss,
            regularization=0.05,
            rng=np.random.default_rng(2024),
            **params,
        ).coef

    parallel = fit()
    _sequential(monkeypatch, [skeleton, admm])
    in_turn = fit()
    np.testing.assert_array_equal(parallel, in_turn)


def federated_problem(
    protocol: str,
    data: Sequence[tuple[FloatArray, FloatArray]],
    *,
    params: dict[str, Any],
    loss: str = "logistic",
) -> Any:
    from service.dp.federated import make_federated_problem

    return make_federated_problem(
        protocol,
        site_sizes=[int(X.shape[0]) for X, _ in data],
        d=int(data[0][0].shape[1]),
        epsilon=2.0,
        delta=1e-6,
        loss=loss,
        regularization=0.05,
        params=params,
    )
