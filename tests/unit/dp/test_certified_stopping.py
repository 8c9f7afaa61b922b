"""Output perturbation and the noisy average stop on the *proved* gradient bound (issue 25 §4):
the centre they release has a certified ‖∇J‖ ≤ τ, the solver is asked for τ/4, and when the
bound cannot be met nothing is released."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from service.dp import calibrate, certified, lattice, make_problem
from service.dp.base import Problem
from service.dp.federated import federated_calibrate, federated_fit, noisy_average
from service.dp.losses import HuberLoss, LogisticLoss, Loss
from service.dp.mechanisms.output_perturbation import MECHANISM as OUTPUT_PERTURBATION
from service.dp.solvers import ConvergenceError, SolverResult
from tests.unit.dp.federated._data import make_sites

FloatArray = NDArray[np.float64]


def _data(n: int, d: int, seed: int) -> tuple[FloatArray, FloatArray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0) * (1.0 + 1e-12)
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def _proved(X: FloatArray, y: FloatArray, loss: Loss, w: FloatArray, lam: float) -> float:
    return certified.gradient_bound(
        X,
        y,
        loss,
        w,
        regularization=lam,
        extra_regularization=0.0,
        noise=lattice.Enclosure(value=np.zeros(X.shape[1]), radius=0.0),
    )


class _Spy:
    """Records the centres handed to the exact lattice release, and the solver's targets."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.centres: list[FloatArray] = []
        self.tols: list[float] = []
        release = lattice.norm_exponential_release
        solve = certified.solve_erm

        def spy_release(centre: FloatArray, **kwargs: Any) -> FloatArray:
            self.centres.append(np.array(centre, copy=True))
            return release(centre, **kwargs)

        def spy_solve(*args: Any, **kwargs: Any) -> SolverResult:
            self.tols.append(float(kwargs["tol"]))
            return solve(*args, **kwargs)

        monkeypatch.setattr(lattice, "norm_exponential_release", spy_release)
        monkeypatch.setattr(certified, "solve_erm", spy_solve)

    @staticmethod
    def never_certified(monkeypatch: pytest.MonkeyPatch) -> None:
        """A certificate that is never met (whatever the solver returns)."""

        def hopeless(*args: Any, **kwargs: Any) -> float:
            return math.inf

        monkeypatch.setattr(certified, "gradient_bound", hopeless)
        monkeypatch.setattr(certified, "gradient_bound_from_pass", hopeless)


@pytest.mark.parametrize("loss_name", ["logistic", "huber"])
def test_output_perturbation_releases_a_minimiser_with_a_proved_gradient_bound(
    monkeypatch: pytest.MonkeyPatch, loss_name: str
) -> None:
    X, y = _data(400, 5, seed=1)
    lam = 0.01
    cal = calibrate(
        "output_perturbation", n=400, d=5, epsilon=1.0, regularization=lam, loss=loss_name
    )
    tau = float(cal.details["certificate_tolerance"])
    spy = _Spy(monkeypatch)
    problem = _problem("output_perturbation", 400, 5, lam, loss_name)
    OUTPUT_PERTURBATION.run(X, y, problem, cal, rng=np.random.default_rng(2), progress=None)
    assert len(spy.centres) == 1
    loss: Loss = LogisticLoss() if loss_name == "logistic" else HuberLoss(h=0.5)
    assert _proved(X, y, loss, spy.centres[0], lam) <= tau
    assert spy.tols[0] == tau / 4.0  # the solver's own target leaves room for the rounding


def test_output_perturbation_releases_nothing_when_the_bound_is_not_met(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    X, y = _data(200, 3, seed=3)
    cal = calibrate("output_perturbation", n=200, d=3, epsilon=1.0, regularization=0.1)
    spy = _Spy(monkeypatch)
    _Spy.never_certified(monkeypatch)
    problem = _problem("output_perturbation", 200, 3, 0.1, "logistic")
    with pytest.raises(ConvergenceError, match="no model was released"):
        OUTPUT_PERTURBATION.run(X, y, problem, cal, rng=np.random.default_rng(4), progress=None)
    assert spy.centres == []  # the release was never reached
    tau = float(cal.details["certificate_tolerance"])
    assert spy.tols == [tau / 4.0, tau / 256.0]  # one tighter retry, then give up


def test_noisy_average_releases_the_mean_of_certified_local_minimisers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = make_sites((120, 200, 150), 4, seed=5)
    lam = 0.05
    cal = federated_calibrate(
        "noisy_average", site_sizes=(120, 200, 150), d=4, epsilon=1.0, regularization=lam
    )
    tau = float(cal.details["certificate_tolerance"])
    local: list[FloatArray] = []
    fit_locally = noisy_average.NoisyAverageSite.local_minimiser

    def spy_local(self: noisy_average.NoisyAverageSite, *args: Any) -> FloatArray:
        out = fit_locally(self, *args)
        local.append(out)
        return out

    monkeypatch.setattr(noisy_average.NoisyAverageSite, "local_minimiser", spy_local)
    spy = _Spy(monkeypatch)
    federated_fit(
        data, "noisy_average", epsilon=1.0, regularization=lam, rng=np.random.default_rng(6)
    )
    assert len(local) == 3
    for (X, y), w in zip(data, local, strict=True):
        assert _proved(X, y, LogisticLoss(), w, lam) <= tau
    assert spy.tols == [tau / 4.0] * 3
    assert len(spy.centres) == 1
    np.testing.assert_array_equal(spy.centres[0], (local[0] + local[1] + local[2]) / 3)


def test_noisy_average_releases_nothing_when_a_site_is_not_certified(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = make_sites((60, 80), 3, seed=7)
    spy = _Spy(monkeypatch)
    _Spy.never_certified(monkeypatch)
    with pytest.raises(ConvergenceError, match="site 0's local minimiser could not be certified"):
        federated_fit(
            data, "noisy_average", epsilon=1.0, regularization=0.1, rng=np.random.default_rng(8)
        )
    assert spy.centres == []
    assert len(spy.tols) == 2  # site 0: one tighter retry; site 1 is never asked


def _problem(mechanism: str, n: int, d: int, lam: float, loss: str) -> Problem:
    return make_problem(
        mechanism, n=n, d=d, epsilon=1.0, delta=0.0, loss=loss, regularization=lam, params={}
    )[1]
