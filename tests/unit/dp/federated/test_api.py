"""The federated entry points: validation, costs never above the offer, JSON-safe records,
progress and cancellation per round, a failing site fails the job, and the coordinators see
only the messages the protocols allow."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from service.dp.core.losses import LogisticLoss
from service.dp.core.validation import PrivacyParameterError
from service.dp.federated import (
    FEDERATED_PROTOCOLS,
    FederatedCalibration,
    FederatedResult,
    admm,
    distributed_lasso,
    federated_calibrate,
    federated_fit,
    noisy_average,
    psgd,
)
from service.dp.federated._common import RoundClock
from service.dp.optimize.solvers import ConvergenceError
from tests.unit.dp.federated._data import make_sites

#: One small configuration per protocol (and per variant) for the generic checks.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("noisy_average", {}),
    ("psgd", {"iterations": 12}),
    ("admm", {"perturbation": "dual", "iterations": 6}),
    ("admm", {"perturbation": "primal", "iterations": 6, "topology": "ring"}),
    ("admm", {"perturbation": "dual", "iterations": 6, "delta_prime": 1e-6}),
    ("admm", {"perturbation": "none", "iterations": 6}),
    ("distributed_lasso", {"loss": "squared", "iterations": 9}),
    ("distributed_lasso", {"loss": "squared", "iterations": 9, "noise": False}),
]
IDS = [f"{p}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for p, kw in CASES]


def _fit(protocol: str, params: dict[str, Any], **extra: Any) -> FederatedResult:
    sites = extra.pop("sites", None) or make_sites((40, 60, 50), 3, seed=1)
    return federated_fit(
        sites,
        protocol,
        epsilon=extra.pop("epsilon", 1.0),
        delta=extra.pop("delta", 1e-5),
        regularization=0.1,
        rng=extra.pop("rng", np.random.default_rng(0)),
        **params,
        **extra,
    )


def test_protocol_names() -> None:
    assert FEDERATED_PROTOCOLS == ("noisy_average", "psgd", "admm", "distributed_lasso")


@pytest.mark.parametrize(("protocol", "params"), CASES, ids=IDS)
def test_calibration_is_json_safe_and_within_the_offer(
    protocol: str, params: dict[str, Any]
) -> None:
    for eps, delta in [(0.1, 1e-6), (1.0, 1e-5), (8.0, 1e-3)]:
        cal = federated_calibrate(
            protocol,
            site_sizes=(40, 60, 50),
            d=3,
            epsilon=eps,
            delta=delta,
            regularization=0.1,
            **params,
        )
        assert isinstance(cal, FederatedCalibration)
        json.dumps(cal.details, allow_nan=False)
        assert len(cal.site_costs) == 3
        for cost in cal.site_costs:
            assert cost.epsilon <= eps
            assert cost.delta <= delta
        assert cal.rounds >= 1
        if cal.private:
            assert max(c.epsilon for c in cal.site_costs) > 0.5 * eps
        else:
            assert all((c.epsilon, c.delta) == (0.0, 0.0) for c in cal.site_costs)
            assert cal.guarantee == "no differential privacy"


@pytest.mark.parametrize(("protocol", "params"), CASES, ids=IDS)
def test_progress_is_reported_once_per_round(protocol: str, params: dict[str, Any]) -> None:
    seen: list[float] = []
    result = _fit(protocol, params, progress=seen.append)
    rounds = result.calibration.rounds
    assert len(seen) == rounds == result.rounds_run == len(result.round_seconds)
    # Called every round (so a cancel takes effect), but the value moves in quarters only.
    assert seen == [math.floor(4 * (t + 1) / rounds) / 4 for t in range(rounds)]
    assert set(seen) <= {0.0, 0.25, 0.5, 0.75, 1.0}
    assert seen[-1] == 1.0
    assert result.protocol == protocol
    assert result.seeded
    assert result.coef.shape == (3,)
    assert np.all(np.isfinite(result.coef))


class Cancelled(Exception):
    pass


@pytest.mark.parametrize(("protocol", "params"), CASES, ids=IDS)
def test_an_exception_from_progress_aborts_the_fit(protocol: str, params: dict[str, Any]) -> None:
    calls: list[float] = []
    cancel = Cancelled("cancelled by the user")

    def progress(fraction: float) -> None:
        calls.append(fraction)
        if len(calls) == 1:
            raise cancel

    with pytest.raises(Cancelled) as info:
        _fit(protocol, params, progress=progress)
    assert info.value is cancel
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("protocol", "params", "site_class", "method"),
    [
        ("noisy_average", {}, noisy_average.NoisyAverageSite, "local_minimiser"),
        ("psgd", {"iterations": 5}, psgd.PSGDSite, "noisy_gradient"),
        ("admm", {"iterations": 5}, admm.ADMMSite, "local_step"),
        ("distributed_lasso", {"loss": "squared"}, distributed_lasso.LassoSite, "gradient_sum"),
    ],
)
def test_a_failing_site_fails_the_whole_job(
    monkeypatch: pytest.MonkeyPatch,
    protocol: str,
    params: dict[str, Any],
    site_class: type,
    method: str,
) -> None:
    original = getattr(site_class, method)

    def failing(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.index == 1:
            raise ConvergenceError("the local solver did not converge")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(site_class, method, failing)
    progress: list[float] = []
    with pytest.raises(ConvergenceError) as info:
        _fit(protocol, params, progress=progress.append)
    assert "raised in the local step of site 1" in info.value.__notes__
    assert progress == []  # the first round never completed


def test_sites_with_different_dimensions_are_rejected() -> None:
    sites = make_sites((30, 30), 3, seed=0) + make_sites((30,), 4, seed=1)
    with pytest.raises(PrivacyParameterError, match="same number of features: site 0 has 3"):
        federated_fit(sites, "noisy_average", epsilon=1.0, regularization=0.1)


def test_each_site_is_validated() -> None:
    sites = make_sites((30, 30), 3, seed=0)
    X, y = sites[1]
    sites[1] = (X * 2.0, y)
    with pytest.raises(ValueError, match="site 1: every row of X must have L2 norm ≤ 1"):
        federated_fit(sites, "noisy_average", epsilon=1.0, regularization=0.1)
    sites[1] = (X, np.where(y > 0, 1.0, 0.0))
    with pytest.raises(ValueError, match="site 1: y must contain only the labels -1 and \\+1"):
        federated_fit(sites, "noisy_average", epsilon=1.0, regularization=0.1)


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        ({"protocol": "gossip"}, "unknown federated protocol 'gossip'; choose one of"),
        ({"site_sizes": ()}, "at least one site"),
        ({"site_sizes": (10, 0)}, "must be a positive integer"),
        ({"site_sizes": (10, 2.5)}, "must be a positive integer"),
        ({"d": 0}, "d must be a positive integer"),
        ({"epsilon": 0.0}, "epsilon must be a finite number > 0"),
        ({"epsilon": math.inf}, "epsilon must be a finite number > 0"),
        ({"delta": 1.0}, "delta must satisfy"),
        ({"regularization": 0.0}, "regularization must be a finite number > 0"),
        ({"loss": "hinge"}, "supports the loss 'logistic' or 'huber', got 'hinge'"),
        ({"loss": "squared"}, "supports the loss 'logistic' or 'huber'"),
        ({"loss": "huber", "h": -1.0}, "h must be a finite number > 0"),
        ({"h": 0.5}, "unknown parameter"),
        ({"weights": [1, 2]}, "unknown parameter\\(s\\) for noisy_average: weights"),
    ],
)
def test_bad_inputs_name_the_rule(kwargs: dict[str, Any], rule: str) -> None:
    args: dict[str, Any] = {
        "protocol": "noisy_average",
        "site_sizes": (10, 20),
        "d": 3,
        "epsilon": 1.0,
        "delta": 0.0,
        "regularization": 0.1,
    }
    args.update(kwargs)
    protocol = args.pop("protocol")
    with pytest.raises(ValueError, match=rule):
        federated_calibrate(protocol, **args)


def test_rng_must_be_a_generator_and_none_uses_the_csprng() -> None:
    sites = make_sites((30, 30), 2, seed=0)
    with pytest.raises(PrivacyParameterError, match=r"numpy\.random\.Generator"):
        federated_fit(
            sites,
            "noisy_average",
            epsilon=1.0,
            regularization=0.1,
            rng=np.random.RandomState(0),  # type: ignore[arg-type]
        )
    a = federated_fit(sites, "noisy_average", epsilon=1.0, regularization=0.1)
    b = federated_fit(sites, "noisy_average", epsilon=1.0, regularization=0.1)
    assert not a.seeded
    assert not np.array_equal(a.coef, b.coef)


def test_seeded_runs_are_reproducible() -> None:
    params = {"iterations": 8}
    a = _fit("psgd", params, rng=np.random.default_rng(3))
    b = _fit("psgd", params, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(a.coef, b.coef)


# ------------------------------------------------------------ the coordinator sees messages only


class MessageSpy:
    """Stands between a coordinator and a site: exposes only the protocol's methods (and the
    public index), records every argument and answer, and fails on any other attribute."""

    def __init__(self, site: Any, methods: tuple[str, ...], log: list[Any]) -> None:
        self._site = site
        self._methods = methods
        self._log = log
        self.index = site.index

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in self._methods:
            raise AssertionError(f"the coordinator asked a site for {name!r}")
        method = getattr(self._site, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self._log.extend(args)
            self._log.extend(kwargs.values())
            answer = method(*args, **kwargs)
            self._log.append(answer)
            return answer

        return call


def _crossing_arrays(log: list[Any]) -> list[np.ndarray]:
    arrays: list[np.ndarray] = []
    for item in log:
        if isinstance(item, np.ndarray):
            arrays.append(item)
        elif isinstance(item, list | tuple):
            arrays.extend(_crossing_arrays(list(item)))
    return arrays


def _check_only_vectors_crossed(log: list[Any], d: int) -> None:
    """Only d-vectors crossed."""
    arrays = _crossing_arrays(log)
    assert arrays, "no message crossed"
    assert {array.shape for array in arrays} == {(d,)}


def test_coordinators_see_only_d_vectors() -> None:
    data = make_sites((40, 60, 50), 3, seed=2)
    loss = LogisticLoss()
    log: list[Any] = []

    # noisy_average: the aggregator asks each site for its local minimiser
    spies = [
        MessageSpy(noisy_average.NoisyAverageSite(k, X, y), ("local_minimiser",), log)
        for k, (X, y) in enumerate(data)
    ]
    noisy_average.aggregate(
        spies,
        loss,
        0.1,
        beta=5.0,
        tolerance=1e-10,
        rng=np.random.default_rng(0),
        clock=RoundClock(1, None),
    )
    _check_only_vectors_crossed(log, 3)

    # psgd: one noisy gradient per site and round, nothing else
    log.clear()
    spies = [
        MessageSpy(psgd.PSGDSite(k, X, y, loss), ("noisy_gradient",), log)
        for k, (X, y) in enumerate(data)
    ]
    psgd.coordinate(
        spies,
        total=150,
        d=3,
        regularization=0.1,
        smoothness=0.35,
        momentum=0.5,
        sigmas=[1.0, 1.0, 1.0],
        iterations=4,
        schedule="nesterov",
        rng=np.random.default_rng(0),
        clock=RoundClock(4, None),
    )
    _check_only_vectors_crossed(log, 3)

    # admm: local steps on neighbours' broadcasts, dual updates; DVP's certified release
    # spends each site's release budget α_r (a number, like ζ and Φ)
    log.clear()
    spies = [
        MessageSpy(
            admm.ADMMSite(k, X, y, loss=loss, regularization=0.1, total=150, penalty=0.01),
            ("local_step", "dual_update"),
            log,
        )
        for k, (X, y) in enumerate(data)
    ]
    admm.coordinate(
        spies,
        [[1, 2], [0, 2], [0, 1]],
        d=3,
        iterations=3,
        perturbation="dual",
        phis=[0.0, 0.0, 0.0],
        zetas=[1.0, 1.0, 1.0],
        rng=np.random.default_rng(0),
        clock=RoundClock(3, None),
        release_epsilons=[0.01, 0.01, 0.01],
    )
    _check_only_vectors_crossed(log, 3)

    # distributed_lasso: gradient sums
    log.clear()
    spies = [
        MessageSpy(distributed_lasso.LassoSite(k, X, y), ("gradient_sum",), log)
        for k, (X, y) in enumerate(data)
    ]
    distributed_lasso.coordinate(
        spies,
        total=150,
        d=3,
        l1=0.01,
        step=1.0,
        iterations=3,
        accelerated=True,
        clip=1.0,
        sigmas=[1.0, 1.0, 1.0],
        rng=np.random.default_rng(0),
        clock=RoundClock(3, None),
    )
    _check_only_vectors_crossed(log, 3)


def test_a_coordinator_touching_site_data_would_be_caught() -> None:
    (X, y) = make_sites((10,), 2, seed=0)[0]
    spy = MessageSpy(distributed_lasso.LassoSite(0, X, y), ("gradient_sum",), [])
    with pytest.raises(AssertionError, match="asked a site for '_X'"):
        _ = spy._X


def test_a_site_refuses_to_send_anything_but_a_finite_d_vector() -> None:
    (X, y) = make_sites((10,), 2, seed=0)[0]
    site = distributed_lasso.LassoSite(0, X, y)
    with pytest.raises(ValueError, match="only send a vector of length 2"):
        site._send(X)
    with pytest.raises(ConvergenceError, match="non-finite"):
        site._send(np.array([np.nan, 0.0]))
