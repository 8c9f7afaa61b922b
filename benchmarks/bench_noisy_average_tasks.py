"""The federated noisy average on multi-class and numeric labels (issue 29): three sites
against one site's output perturbation.

Adult re-targeted to marital status (7 classes, multinomial loss) and to hours per week
(numeric, [1, 99], Huber loss h = ½), :mod:`benchmarks.datasets29`. The training split's rows
are shuffled (public seed) into three equal sites. At each ε and λ, ``noisy_average`` averages
the three sites' certified fits and adds one noise draw calibrated to 2L/(n_min·λ) over the 3
sites (L = √2 or h); the baseline is ``output_perturbation`` on site 0 alone (the same loss,
sensitivity 2L/(n_0·λ)): what one site gets without the study, at the same ε charged to it.
The figure is the test split's accuracy (multi-class) or RMSE in hours (regression), mean ±
standard error over ``--seeds`` noise seeds, with the non-private fit on the pooled rows for
reference.

    PYTHONPATH=. python benchmarks/bench_noisy_average_tasks.py --seeds 3
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from benchmarks._tasks29 import mean_se
from benchmarks.datasets29 import HOURS_BOUNDS, adult_hours, adult_marital
from service.dp import fit
from service.dp.federated import federated_fit

FloatArray = NDArray[np.float64]
SITES = 3


def _coef(result: object) -> FloatArray:
    return np.asarray(result.model.coef, dtype=np.float64)  # type: ignore[attr-defined]


def _mean_se(values: Sequence[float]) -> str:
    mean, se = mean_se(values)
    return f"{mean:.3f} ± {se:.3f}"


def _run(
    name: str,
    X: FloatArray,
    y: FloatArray,
    score: Callable[[FloatArray], float],
    options: dict[str, object],
    args: argparse.Namespace,
) -> None:
    order = np.random.default_rng(2029).permutation(X.shape[0])
    parts = np.array_split(order, SITES)
    sites = [(X[p], y[p]) for p in parts]
    lam0 = min(args.lambdas)
    exact = fit(X, y, "non_private", epsilon=1.0, regularization=lam0, **options)  # type: ignore[arg-type]
    pooled = _coef(exact)
    print(
        f"\n{name}: {SITES} sites of {len(parts[0]):,} rows, d = {X.shape[1]}; non-private "
        f"pooled fit (λ = {min(args.lambdas):g}): {score(pooled):.3f}"
    )
    print("| ε | λ | noisy_average, 3 sites | output perturbation, site 0 alone | s per fit |")
    print("|---|---|---|---|---|")
    for eps in args.epsilons:
        for lam in args.lambdas:
            fed, one, seconds = [], [], []
            for seed in range(args.seeds):
                start = time.perf_counter()
                result = federated_fit(
                    sites,
                    "noisy_average",
                    epsilon=eps,
                    regularization=lam,
                    rng=np.random.default_rng(seed),
                    **options,  # type: ignore[arg-type]
                )
                seconds.append(time.perf_counter() - start)
                fed.append(score(_coef(result)))
                alone = fit(
                    sites[0][0],
                    sites[0][1],
                    "output_perturbation",
                    epsilon=eps,
                    regularization=lam,
                    rng=np.random.default_rng(1000 + seed),
                    **options,  # type: ignore[arg-type]
                )
                one.append(score(_coef(alone)))
            print(
                f"| {eps:g} | {lam:g} | {_mean_se(fed)} | {_mean_se(one)} | "
                f"{float(np.median(seconds)):.1f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 1.0])
    parser.add_argument("--lambdas", type=float, nargs="+", default=[1e-3, 1e-2])
    parser.add_argument("--only", choices=("marital", "hours"), default=None)
    args = parser.parse_args()

    if args.only in (None, "marital"):
        mc = adult_marital()
        K = len(mc.classes)

        def accuracy(C: FloatArray) -> float:
            return float(np.mean(np.argmax(mc.X_test @ C.T, axis=1) == mc.y_test))

        _run(
            f"Adult marital status (accuracy, {K} classes)",
            mc.X,
            mc.y,
            accuracy,
            {"task": "multiclass", "n_classes": K},
            args,
        )
    if args.only in (None, "hours"):
        hr = adult_hours()

        def rmse(w: FloatArray) -> float:
            lower, upper = HOURS_BOUNDS
            v = lower + (np.clip(hr.X_test @ w, -1.0, 1.0) + 1.0) / 2.0 * (upper - lower)
            return float(np.sqrt(np.mean((v - hr.v_test) ** 2)))

        _run(
            "Adult hours per week (RMSE in hours, Huber h = 0.5)",
            hr.X,
            hr.y,
            rmse,
            {"task": "regression", "loss": "huber"},
            args,
        )


if __name__ == "__main__":
    main()
