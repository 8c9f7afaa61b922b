"""Cost in time of the float-safe samplers (issue 19 §1) on an Adult fit.

Two mechanisms, each with the old and the new sampler, on Adult's train split (n = 30,162,
d = 106, logistic loss, λ = 10⁻³, ε = 1):

* ``output_perturbation``: old = ŵ + θ·gammaincinv(d, U)·g/‖g‖ (52-bit U) rounded to 2⁻³²;
  new = the exact grid release of :mod:`service.dp.noise.lattice`.
* ``objective_perturbation``: old = the same inverse-CDF norm inside the objective, the
  solver's answer rounded to 2⁻³²; new = the certified minimiser release of
  :mod:`service.dp.optimize.certified` (the noise enclosed with a proved radius, the solver's answer
  certified by a proved gradient bound, then an exact grid release of the small noise that
  covers the certified distance).

Both variants run through ``service.dp.fit`` on a prepared design; the old sampler is patched
in for its runs only. Repetitions alternate old/new so both see the same machine load; the
report gives median wall-clock and CPU times, their ratio (new/old), and the sampler alone.

Gradient releases (issue 19 §1, second part), same data:

* ``dp_sgd`` (one epoch, b = 50: 603 updates): old = the noisy mean gradient ḡ + z with z a
  numpy draw (the pre-lattice ``update_noise``), not on the grid; new = the exact grid release
  of :class:`service.dp.noise.lattice.NormExponentialBlock` (fast path with its rigorous bound,
  decimal path near cell boundaries); "decimal only" = the same release with the fast path
  switched off (what the exact sampler alone would cost).
* ``distributed_lasso`` (Adult train split into K = 3 sites, T = 200 rounds, ε = 1,
  δ = 10⁻⁵): old = the clipped sum + a numpy N(0, σ²) draw; new = the exact Gaussian grid
  release per site and round (:class:`service.dp.noise.lattice.GaussianBlock`, 32 rounds drawn at
  once).

Run from the repository root::

    .venv/bin/python -m benchmarks.bench_float_safe            # 15 repetitions, ≈ 4 min
    .venv/bin/python -m benchmarks.bench_float_safe --reps 3   # smoke run
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from typing import Any
from unittest import mock

import numpy as np
from numpy.typing import NDArray
from scipy import special

import service.dp as dp
from benchmarks import float_samplers
from benchmarks._common import environment, limit_threads, load_average, median, timed
from benchmarks.adult import design
from service.dp.core.losses import LogisticLoss
from service.dp.data.prepared import prepare_design
from service.dp.federated import federated_fit
from service.dp.mechanisms import objective_perturbation
from service.dp.mechanisms._common import problem_loss
from service.dp.noise import draws as noise
from service.dp.noise import lattice
from service.dp.optimize import certified
from service.dp.optimize.solvers import minimize_erm

FloatArray = NDArray[np.float64]
LAMBDA = 1e-3
EPSILON = 1.0


def old_norm_exponential_vector(
    d: int, *, beta: float, rng: np.random.Generator | None = None
) -> FloatArray:
    """The sampler before issue 19: norm θ·P⁻¹(d, U) by inverse CDF with a 52-bit U."""
    u = noise.uniforms(1, rng)
    r = float(special.gammaincinv(float(d), u)[0]) / beta
    return r * float_samplers.uniform_direction(d, rng=rng)


def old_release(
    centre: FloatArray, *, beta: float, rng: np.random.Generator | None = None
) -> FloatArray:
    """ŵ + b rounded to the 2⁻³² grid, b from the old sampler."""
    b = old_norm_exponential_vector(int(centre.size), beta=beta, rng=rng)
    return noise.round_to_grid(centre + b)


def uncertified_objective(
    X: FloatArray,
    y: FloatArray,
    problem: Any,
    calibration: Any,
    *,
    rng: np.random.Generator | None,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
) -> FloatArray:
    """Objective perturbation before the certified release: the old sampler's double b fed
    to the solver, its answer released as is (rounded to the grid by the caller)."""
    details = calibration.details
    b = old_norm_exponential_vector(problem.d, beta=float(details["beta"]), rng=rng)
    return minimize_erm(
        X,
        y,
        problem_loss(problem),
        regularization=problem.regularization,
        linear=b,
        extra_regularization=float(details["Delta"]),
        centre=centre,
        centre_weight=centre_weight,
    )


def old_samplers() -> AbstractContextManager[object]:
    """Patch the old samplers into the modules the mechanisms call through."""
    return _patched(
        (lattice, "norm_exponential_release", old_release),
        (objective_perturbation, "run_certified", uncertified_objective),
    )


def _patched(*replacements: tuple[object, str, object]) -> ExitStack:
    """Every (module, name, value) patched in, undone when the returned stack closes."""
    stack = ExitStack()
    for target, name, value in replacements:
        stack.enter_context(mock.patch.object(target, name, value))
    return stack


def old_update_noise(
    count: int, dim: int, *, beta: float, rng: np.random.Generator | None
) -> FloatArray:
    """DP-SGD's noise before the grid release: norms as sums of exponentials of
    full-resolution uniforms, directions normalised Gaussians (numpy draws)."""
    exponentials = -np.log(float_samplers.full_precision_uniforms(count * dim, rng)).reshape(
        count, dim
    )
    radii = exponentials.sum(axis=1) / beta
    g = float_samplers.gaussian((count, dim), rng=rng)
    norms = np.sqrt(np.einsum("ij,ij->i", g, g))
    return np.asarray(g * (radii / norms)[:, None], dtype=np.float64)


class OldNormExponentialBlock:
    """Stands in for :class:`lattice.NormExponentialBlock`: centre + a numpy draw."""

    def __init__(
        self, count: int, dim: int, *, beta: float, rng: np.random.Generator | None = None
    ) -> None:
        self._z = old_update_noise(count, dim, beta=beta, rng=rng)

    def release(self, j: int, centre: FloatArray) -> FloatArray:
        out: FloatArray = centre + self._z[j]
        return out


class OldGaussianBlock:
    """Stands in for :class:`lattice.GaussianBlock` at the Lasso sites: each round's answer is
    the clipped sum + N(0, σ²I) drawn by numpy at that round, as before the grid release."""

    def __init__(
        self, count: int, dim: int, *, sigma: float, rng: np.random.Generator | None = None
    ) -> None:
        self.count, self.dim, self.sigma, self._rng = count, dim, sigma, rng

    def release(self, j: int, centre: FloatArray) -> FloatArray:
        del j
        draw = float_samplers.gaussian_vector(self.dim, sigma=self.sigma, rng=self._rng)
        out: FloatArray = centre + draw
        return out


def old_gradient_samplers() -> AbstractContextManager[object]:
    return _patched(
        (lattice, "NormExponentialBlock", OldNormExponentialBlock),
        (lattice, "GaussianBlock", OldGaussianBlock),
    )


def _undecided(
    centre: FloatArray, y: FloatArray, bound: FloatArray
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    del y, bound
    return np.zeros(centre.size, dtype=np.int64), np.zeros(centre.size, dtype=bool)


def decimal_only() -> AbstractContextManager[object]:
    """The exact releases with the fast path switched off: every coordinate undecided."""
    return _patched((lattice, "_fast_cells", _undecided))


def _sgd(X: FloatArray, y: FloatArray) -> Callable[[], object]:
    return lambda: dp.fit(
        X, y, "dp_sgd", epsilon=EPSILON, regularization=LAMBDA, batch_size=50, epochs=1
    )


def _lasso(X: FloatArray, y: FloatArray) -> Callable[[], object]:
    sites = [(X[k::3], y[k::3]) for k in range(3)]
    return lambda: federated_fit(
        sites,
        "distributed_lasso",
        epsilon=EPSILON,
        delta=1e-5,
        loss="squared",
        regularization=LAMBDA,
    )


def gradient_rows(
    X: FloatArray, y: FloatArray, reps: int, decimal_reps: int
) -> list[tuple[str, float, float, float, float, float | None]]:
    """(case, old wall, new wall, old CPU, new CPU, decimal-only CPU) medians."""
    rows = []
    for name, make in (("dp_sgd (1 epoch, b = 50)", _sgd), ("distributed_lasso (K = 3)", _lasso)):
        fit = make(X, y)
        fit()  # warm caches
        wall: dict[str, list[float]] = {"old": [], "new": []}
        cpu: dict[str, list[float]] = {"old": [], "new": [], "decimal": []}
        for _ in range(reps):
            with old_gradient_samplers():
                _, w, c = timed(fit)
            wall["old"].append(w)
            cpu["old"].append(c)
            _, w, c = timed(fit)
            wall["new"].append(w)
            cpu["new"].append(c)
        for _ in range(decimal_reps):
            with decimal_only():
                _, _, c = timed(fit)
            cpu["decimal"].append(c)
        rows.append(
            (
                name,
                median(wall["old"]),
                median(wall["new"]),
                median(cpu["old"]),
                median(cpu["new"]),
                median(cpu["decimal"]) if cpu["decimal"] else None,
            )
        )
    return rows


def _fit(data: Any, mechanism: str) -> Callable[[], object]:
    """A fit on a prepared design (the solver alone) or on the raw arrays (validation too)."""
    if isinstance(data, tuple):
        X, y = data
        return lambda: dp.fit(X, y, mechanism, epsilon=EPSILON, regularization=LAMBDA)
    return lambda: dp.fit(data, None, mechanism, epsilon=EPSILON, regularization=LAMBDA)


def _decimal_release(centre: FloatArray, beta: float) -> FloatArray:
    with decimal_only():
        return lattice.norm_exponential_release(centre, beta=beta)


def _block_releases(d: int, beta: float, count: int) -> None:
    block = lattice.NormExponentialBlock(count, d, beta=beta)
    for j in range(count):
        block.release(j, np.zeros(d))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument(
        "--decimal-reps", type=int, default=2, help="runs with the fast path off (slow)"
    )
    parser.add_argument(
        "--only-gradients", action="store_true", help="skip the vector releases of part 1"
    )
    args = parser.parse_args(argv)
    pool = limit_threads(1)
    X, y, _ = design("train")
    prepared = prepare_design(X, y)
    d = int(X.shape[1])
    print(environment(1))
    print(f"Adult train: n = {X.shape[0]}, d = {d}; λ = {LAMBDA:g}, ε = {EPSILON:g}")
    print(f"load average before: {load_average()}")
    rows = []
    cases = [
        (mechanism, kind, data)
        for mechanism in ("output_perturbation", "objective_perturbation")
        for kind, data in (("prepared design", prepared), ("raw arrays", (X, y)))
        if not args.only_gradients
    ]
    for mechanism, kind, data in cases:
        wall: dict[str, list[float]] = {"old": [], "new": []}
        cpu: dict[str, list[float]] = {"old": [], "new": []}
        _fit(data, mechanism)()  # warm the prepared design's caches
        for _ in range(args.reps):
            with old_samplers():
                _, w, c = timed(_fit(data, mechanism))
            wall["old"].append(w)
            cpu["old"].append(c)
            _, w, c = timed(_fit(data, mechanism))
            wall["new"].append(w)
            cpu["new"].append(c)
        rows.append(
            (
                f"{mechanism} ({kind})",
                median(wall["old"]),
                median(wall["new"]),
                median(cpu["old"]),
                median(cpu["new"]),
            )
        )
    gradients = gradient_rows(X, y, args.reps, args.decimal_reps)
    beta = 15.0
    sampler_times: dict[str, tuple[float, float]] = {}
    samplers: list[tuple[str, Callable[[], object]]] = [
        ("old release (inverse CDF + round)", lambda: old_release(np.zeros(d), beta=beta)),
        ("exact grid release", lambda: lattice.norm_exponential_release(np.zeros(d), beta=beta)),
        (
            "exact grid release, decimal path only",
            lambda: _decimal_release(np.zeros(d), beta),
        ),
        (
            "exact grid release, 603 in one block (per release)",
            lambda: _block_releases(d, beta, 603),
        ),
        ("old norm-exponential vector", lambda: old_norm_exponential_vector(d, beta=beta)),
        ("full-resolution vector", lambda: float_samplers.norm_exponential_vector(d, beta=beta)),
        (
            "enclosed norm-exponential vector (certified release)",
            lambda: lattice.norm_exponential_enclosure(d, beta=beta),
        ),
        (
            "proved gradient bound on Adult (certified release)",
            lambda: certified.gradient_bound(
                X,
                y,
                LogisticLoss(),
                np.zeros(d),
                regularization=LAMBDA,
                extra_regularization=0.0,
                noise=lattice.Enclosure(np.zeros(d), 0.0),
            ),
        ),
    ]
    for name, fn in samplers:
        repeat = 5 if "decimal" in name or "block" in name else 50
        per = 603 if "block" in name else 1
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(repeat):
            fn()
        sampler_times[name] = (
            (time.perf_counter() - t0) / repeat / per,
            (time.process_time() - c0) / repeat / per,
        )
    print(f"load average after: {load_average()}")
    print()
    print(
        "| mechanism | old wall (s) | new wall (s) | new/old wall | old CPU (s) | new CPU (s) "
        "| new/old CPU |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, ow, nw, oc, nc in rows:
        print(
            f"| {name} | {ow:.3f} | {nw:.3f} | {nw / ow:.3f} | {oc:.3f} | {nc:.3f} "
            f"| {nc / oc:.3f} |"
        )
    print()
    print(
        "| gradient mechanism | old wall (s) | new wall (s) | new/old wall | old CPU (s) "
        "| new CPU (s) | new/old CPU | decimal only CPU (s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, ow, nw, oc, nc, dc in gradients:
        shown = "—" if dc is None else f"{dc:.3f}"
        print(
            f"| {name} | {ow:.3f} | {nw:.3f} | {nw / ow:.3f} | {oc:.3f} | {nc:.3f} "
            f"| {nc / oc:.3f} | {shown} |"
        )
    print()
    print(f"| sampler alone (d = {d}) | wall ms per draw | CPU ms per draw |")
    print("|---|---|---|")
    for name, (seconds, cpu_seconds) in sampler_times.items():
        print(f"| {name} | {seconds * 1e3:.2f} | {cpu_seconds * 1e3:.2f} |")
    del pool


if __name__ == "__main__":
    main()
