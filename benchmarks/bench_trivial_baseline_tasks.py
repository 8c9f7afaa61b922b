"""The trivial-model warning without a public reference, on real data (issue 29).

For an ``auto`` fit of a multi-class or numeric label without a public reference, PrivFit
spends a public slice of ε on a private baseline (:mod:`service.dp.analysis.baseline_tasks`)
and warns when the band simulated on a synthetic reference is worse than the baseline's
one-sided bound (:mod:`service.domain.fits.expected_tasks`). This measures, on Adult
(:mod:`benchmarks.datasets29`: marital status, 7 classes; hours per week, bounds [1, 99]) at
several n and ε, what the service does end to end, without the HTTP layer:

* the split of ε, auto's first candidate at the fit's ε, the fit itself (``service.dp.fit``);
* the private baseline released at the slice, the band, the warning;
* and, from the test split (which the service never sees), whether the fit is *actually* worse
  than the trivial model (always the training majority class; the training mean) and by how
  much the private baseline misses the true one.

``--dp-sgd`` replaces auto's choice by DP-SGD with its defaults at λ = 10⁻³ (as in
:mod:`benchmarks.bench_multiclass`; DP-SGD has no λ rule), on the multi-class task only: the
band's simulation of DP-SGD at n is the one most unlike its fit at n_sim.

Run: ``.venv/bin/python -m benchmarks.bench_trivial_baseline_tasks [--quick] [--reps N]
[--dp-sgd]``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from benchmarks import datasets29
from service.dp import fit as dp_fit
from service.dp.analysis import baseline_tasks as bt
from service.dp.analysis.auto_tasks import TaskCandidate, rank_for_task
from service.dp.analysis.expected_tasks import expected_task_band_synthetic
from service.dp.optimize.solvers import ConvergenceError

SIZES = (500, 30_162)
EPSILONS = (0.05, 0.3, 1.0, 5.0)
#: ``--dp-sgd``: the fixed λ of DP-SGD (bench_multiclass's).
DP_SGD = TaskCandidate("dp_sgd", regularization=1e-3, loss="logistic")


def one_run(
    task: str,
    data: Any,
    n_classes: int,
    epsilon: float,
    delta: float,
    seed: int,
    dp_sgd: bool = False,
) -> dict[str, Any]:
    """One auto fit (``dp_sgd``: a DP-SGD fit) with its private baseline, band, warning, and
    the truth from the test split."""
    rng = np.random.default_rng(seed)
    n, d = data.X.shape
    fit_eps, base_eps = bt.split_budget(task, n, epsilon)
    if dp_sgd:
        ranked = [DP_SGD]
    else:
        ranked = rank_for_task(
            task, n_classes=n_classes, n=n, d=d, epsilon=fit_eps, delta=delta, loss=None
        ).ranked
    for candidate in ranked:
        try:
            result = dp_fit(
                data.X,
                data.y,
                candidate.mechanism,
                epsilon=fit_eps,
                delta=delta,
                loss=candidate.loss,
                regularization=candidate.regularization,
                rng=rng,
                task=task,  # type: ignore[arg-type]
                n_classes=n_classes,
            )
            break
        except (ValueError, ConvergenceError):
            continue
    else:
        raise RuntimeError("no candidate fits")
    out = np.asarray(result.model.decision_function(data.X_test))
    half = 1.0
    if task == "multiclass":
        actual = float(np.mean(np.argmax(out, axis=1) == data.y_test))
        majority = int(np.argmax(np.bincount(data.y.astype(np.int64), minlength=n_classes)))
        trivial = float(np.mean(data.y_test == majority))
        release = bt.private_histogram(data.y, n_classes, base_eps, rng)
        baseline, kwargs = (
            release.majority,
            {"proportions": bt.reference_proportions(release.proportions)},
        )
        true_baseline = float(np.max(np.bincount(data.y.astype(np.int64))) / n)
        source = "private_count"
    else:
        low, high = data.bounds
        half = (high - low) / 2.0
        y_test = 2.0 * (data.v_test - low) / (high - low) - 1.0
        residual = y_test - np.clip(out, -1.0, 1.0)
        actual = float(np.sqrt(np.mean(residual**2))) * half
        trivial = float(np.sqrt(np.mean((y_test - data.y.mean()) ** 2))) * half
        release = bt.private_spread(data.y, base_eps, rng, half_range=half)
        baseline = release.rmse
        kwargs = {"spread": bt.reference_spread(release.mean, release.variance)}
        true_baseline = float(np.std(data.y)) * half
        source = "private_sums"
    band = expected_task_band_synthetic(
        candidate.mechanism,
        regularization=candidate.regularization,
        params={},
        task=task,
        n_classes=n_classes,
        n=n,
        d=d,
        epsilon=fit_eps,
        delta=delta,
        loss=candidate.loss,
        half_range=half,
        baseline=baseline,
        baseline_sd=release.sd,
        baseline_source=source,
        **kwargs,
    )
    worse = actual < trivial if task == "multiclass" else actual > trivial
    return {
        "mechanism": candidate.mechanism,
        "actual": actual,
        "trivial": trivial,
        "band": band.mean,
        "baseline_error": baseline - true_baseline,
        "threshold": band.threshold,
        "warned": band.worse_than_baseline,
        "worse": worse,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="n = 500 only, one repetition")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dp-sgd", action="store_true", help="DP-SGD, multi-class task only")
    args = parser.parse_args()
    sizes = (500,) if args.quick else SIZES
    reps = 1 if args.quick else args.reps
    tasks = (
        ("multiclass", datasets29.adult_marital(), 0.0, "marital status (K = 7)"),
        ("regression", datasets29.adult_hours(), 0.0, "hours per week, δ = 0 (Huber)"),
        ("regression", datasets29.adult_hours(), 1e-6, "hours per week, δ = 1e-6 (AdaSSP)"),
    )
    if args.dp_sgd:
        tasks = tasks[:1]
    print(
        "| task | n | ε | mechanism | test figure | trivial | band | baseline error |"
        " warned | actually worse |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for task, full, delta, name in tasks:
        k = full.n_classes if task == "multiclass" else 1
        for n in sizes:
            for epsilon in EPSILONS:
                runs = []
                for rep in range(reps):
                    data = datasets29.subsample(full, n, 15_060, seed=rep)
                    runs.append(one_run(task, data, k, epsilon, delta, 1000 + rep, args.dp_sgd))

                def mean(key: str, runs: list[dict[str, Any]] = runs) -> float:
                    return float(np.mean([r[key] for r in runs]))

                warned = sum(r["warned"] for r in runs)
                worse = sum(r["worse"] for r in runs)
                digits = 3 if task == "multiclass" else 2
                print(
                    f"| {name} | {n} | {epsilon:g} | {runs[0]['mechanism']} | "
                    f"{mean('actual'):.{digits}f} | {mean('trivial'):.{digits}f} | "
                    f"{mean('band'):.{digits}f} | {mean('baseline_error'):+.{digits}f} | "
                    f"{warned}/{reps} | {worse}/{reps} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
