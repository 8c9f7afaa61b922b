"""Cost in time of the float-safe samplers (issue 19 §1) on an Adult fit.

Two mechanisms, each with the old and the new sampler, on Adult's train split (n = 30,162,
d = 106, logistic loss, λ = 10⁻³, ε = 1):

* ``output_perturbation``: old = ŵ + θ·gammaincinv(d, U)·g/‖g‖ (52-bit U) rounded to 2⁻³²;
  new = the exact grid release of :mod:`service.dp.lattice`.
* ``objective_perturbation``: old = the same inverse-CDF norm inside the objective; new = the
  norm as a sum of d exponentials of full-precision uniforms
  (:func:`service.dp.noise.norm_exponential_vector`).

Both variants run through ``service.dp.fit`` on a prepared design; the old sampler is patched
in for its runs only. Repetitions alternate old/new so both see the same machine load; the
report gives median wall-clock and CPU times, their ratio (new/old), and the sampler alone.

Run from the repository root::

    .venv/bin/python -m benchmarks.bench_float_safe            # 15 repetitions, ≈ 2 min
    .venv/bin/python -m benchmarks.bench_float_safe --reps 3   # smoke run
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import special

import service.dp as dp
from benchmarks._common import environment, limit_threads, load_average, median, timed
from benchmarks.adult import design
from service.dp import lattice, noise
from service.dp.prepared import prepare_design

FloatArray = NDArray[np.float64]
LAMBDA = 1e-3
EPSILON = 1.0


def old_norm_exponential_vector(
    d: int, *, beta: float, rng: np.random.Generator | None = None
) -> FloatArray:
    """The sampler before issue 19: norm θ·P⁻¹(d, U) by inverse CDF with a 52-bit U."""
    u = noise.uniforms(1, rng)
    r = float(special.gammaincinv(float(d), u)[0]) / beta
    return r * noise.uniform_direction(d, rng=rng)


def old_release(
    centre: FloatArray, *, beta: float, rng: np.random.Generator | None = None
) -> FloatArray:
    """ŵ + b rounded to the 2⁻³² grid, b from the old sampler."""
    b = old_norm_exponential_vector(int(centre.size), beta=beta, rng=rng)
    return noise.round_to_grid(centre + b)


@contextmanager
def old_samplers() -> Iterator[None]:
    """Patch the old samplers into the modules the mechanisms call through."""
    saved = (lattice.norm_exponential_release, noise.norm_exponential_vector)
    setattr(lattice, "norm_exponential_release", old_release)  # noqa: B010
    setattr(noise, "norm_exponential_vector", old_norm_exponential_vector)  # noqa: B010
    try:
        yield
    finally:
        setattr(lattice, "norm_exponential_release", saved[0])  # noqa: B010
        setattr(noise, "norm_exponential_vector", saved[1])  # noqa: B010


def _fit(data: Any, mechanism: str) -> Callable[[], object]:
    """A fit on a prepared design (the solver alone) or on the raw arrays (validation too)."""
    if isinstance(data, tuple):
        X, y = data
        return lambda: dp.fit(X, y, mechanism, epsilon=EPSILON, regularization=LAMBDA)
    return lambda: dp.fit(data, None, mechanism, epsilon=EPSILON, regularization=LAMBDA)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
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
    beta = 15.0
    sampler_times: dict[str, tuple[float, float]] = {}
    samplers: list[tuple[str, Callable[[], object]]] = [
        ("old release (inverse CDF + round)", lambda: old_release(np.zeros(d), beta=beta)),
        ("exact grid release", lambda: lattice.norm_exponential_release(np.zeros(d), beta=beta)),
        ("old norm-exponential vector", lambda: old_norm_exponential_vector(d, beta=beta)),
        ("full-resolution vector", lambda: noise.norm_exponential_vector(d, beta=beta)),
    ]
    for name, fn in samplers:
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(50):
            fn()
        sampler_times[name] = ((time.perf_counter() - t0) / 50, (time.process_time() - c0) / 50)
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
    print(f"| sampler alone (d = {d}) | wall ms per draw | CPU ms per draw |")
    print("|---|---|---|")
    for name, (seconds, cpu_seconds) in sampler_times.items():
        print(f"| {name} | {seconds * 1e3:.2f} | {cpu_seconds * 1e3:.2f} |")
    del pool


if __name__ == "__main__":
    main()
