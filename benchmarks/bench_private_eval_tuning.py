"""Private tuning, private evaluation and the planner (issue 16), on Adult and breast cancer.

1. **Tuning**: objective perturbation at ε ∈ {0.1, 0.5, 1} with candidates λ ∈ {1e-4, 1e-3,
   1e-2, 1e-1}: the privately tuned fit (CMS 2011, total ε) against every fixed λ on all the
   training rows — the best of them chosen with hindsight on the test split, and the default
   λ = 1e-3. Test accuracy, mean ± standard error over the repetitions.
2. **Evaluation**: a model fitted on Adult's training split (objective perturbation, ε = 1,
   λ = 1e-3) is evaluated privately on Adult's test split at ε_eval ∈ {0.01, 0.1}: error of
   the private accuracy estimate against the exact test accuracy, and the coverage of the 95 %
   interval (against the exact test accuracy, i.e. noise only, and its width).
3. **Planner**: Adult's training rows are split into a "private" part (20,000 rows) and a
   disjoint public sample (the other 10,162). The planner simulates the mechanism on the public
   sample with n = 20,000; the actual accuracy is that of fits on the private part, scored on
   Adult's test split.

Run: ``.venv/bin/python -m benchmarks.bench_private_eval_tuning [--quick]``.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks._common import (
    accuracy,
    environment,
    limit_threads,
    load_average,
    markdown_table,
    save_report,
)

FloatArray = NDArray[np.float64]
CANDIDATES: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1)
DEFAULT_LAMBDA = 1e-3
TUNING_EPSILONS: tuple[float, ...] = (0.1, 0.5, 1.0)
EVAL_EPSILONS: tuple[float, ...] = (0.01, 0.1)
PLAN_EPSILONS: tuple[float, ...] = (0.05, 0.1, 0.5, 1.0)
MECHANISM = "objective_perturbation"


def mean_se(values: Sequence[float]) -> str:
    arr = np.asarray(values, dtype=np.float64)
    se = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else 0.0
    return f"{arr.mean():.4f} ± {se:.4f}"


def breast_cancer() -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """scikit-learn's breast cancer data: features scaled to [0, 1] by the training split's
    range (a public-bounds stand-in), an intercept, rows clipped to norm ≤ 1; 70/30 split."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X = np.asarray(data.data, dtype=np.float64)
    y = np.where(data.target == 1, 1.0, -1.0)
    order = np.random.default_rng(0).permutation(X.shape[0])
    cut = int(0.7 * X.shape[0])
    tr, te = order[:cut], order[cut:]
    lo, hi = X[tr].min(axis=0), X[tr].max(axis=0)
    X = np.clip((X - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0, 1.0)
    X = np.hstack([X, np.ones((X.shape[0], 1))])
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    return X[tr], y[tr], X[te], y[te]


def adult() -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    from benchmarks.adult import design

    X, y, _ = design("train")
    Xte, yte, _ = design("test")
    return X, y, Xte, yte


def tuning(
    name: str, data: tuple[FloatArray, ...], repeats: int, rng: np.random.Generator
) -> tuple[list[list[object]], dict[str, Any]]:
    from service.dp import fit
    from service.dp.analysis.selection import tune
    from service.dp.data.prepared import PreparedDesign, prepare_design

    X, y, Xte, yte = data
    prepared = prepare_design(X, y)
    rows: list[list[object]] = []
    raw: dict[str, Any] = {}
    for eps in TUNING_EPSILONS:
        fixed: dict[float, list[float]] = {lam: [] for lam in CANDIDATES}
        tuned: list[float] = []
        chosen: list[float] = []
        for _ in range(repeats):
            for lam in CANDIDATES:
                res = fit(prepared, None, MECHANISM, epsilon=eps, regularization=lam, rng=rng)
                fixed[lam].append(accuracy(Xte @ np.asarray(res.coef), yte))

            def fit_one(part: PreparedDesign, lam: float, eps: float = eps) -> Any:
                return fit(part, None, MECHANISM, epsilon=eps, regularization=lam, rng=rng)

            result = tune(prepared, CANDIDATES, epsilon=eps, fit_one=fit_one, rng=rng)
            tuned.append(accuracy(Xte @ np.asarray(result.result.coef), yte))
            chosen.append(CANDIDATES[result.chosen])
        best = max(CANDIDATES, key=lambda lam: float(np.mean(fixed[lam])))
        counts = {f"{lam:g}": chosen.count(lam) for lam in CANDIDATES}
        rows.append(
            [
                name,
                f"{eps:g}",
                mean_se(tuned),
                f"{mean_se(fixed[best])} (λ = {best:g})",
                mean_se(fixed[DEFAULT_LAMBDA]),
                ", ".join(f"{k}: {v}" for k, v in counts.items() if v),
            ]
        )
        raw[repr(eps)] = {"tuned": tuned, "fixed": {repr(k): v for k, v in fixed.items()}}
        print(rows[-1], flush=True)
    return rows, raw


def evaluation(repeats: int, rng: np.random.Generator) -> tuple[list[list[object]], Any]:
    from service.dp import fit
    from service.dp.analysis.evaluation import evaluate

    X, y, Xte, yte = adult()
    model = fit(X, y, MECHANISM, epsilon=1.0, regularization=DEFAULT_LAMBDA, rng=rng)
    scores = Xte @ np.asarray(model.coef)
    truth = accuracy(scores, yte)
    draw = random.Random(5).randrange
    rows: list[list[object]] = []
    raw: dict[str, Any] = {"true_accuracy": truth}
    for eps in EVAL_EPSILONS:
        errors, covered, widths, auc = [], 0, [], []
        for _ in range(repeats):
            result = evaluate(scores, yte, epsilon=eps, randbelow=draw, bootstrap_rng=rng)
            est = result.metrics["accuracy"]
            low, high = result.intervals["accuracy"]
            errors.append(est - truth)
            covered += low <= truth <= high
            widths.append(high - low)
            auc.append(float(result.roc["auc"]))
        err = np.asarray(errors)
        rows.append(
            [
                f"{eps:g}",
                f"{truth:.4f}",
                f"{np.mean(np.abs(err)):.5f}",
                f"{np.sqrt(np.mean(err**2)):.5f}",
                f"{np.max(np.abs(err)):.5f}",
                f"{covered / repeats:.2f}",
                f"{np.mean(widths):.4f}",
                f"{np.mean(auc):.4f} ± {np.std(auc):.4f}",
            ]
        )
        raw[repr(eps)] = {"errors": errors, "covered": covered, "widths": widths, "auc": auc}
        print(rows[-1], flush=True)
    return rows, raw


def planner(repeats: int, rng: np.random.Generator) -> tuple[list[list[object]], Any]:
    from service.dp import fit
    from service.dp.analysis.planning import simulate_accuracy

    X, y, Xte, yte = adult()
    order = np.random.default_rng(1).permutation(X.shape[0])
    private, public = order[:20_000], order[20_000:]
    Xp, yp = X[private], y[private]
    rows: list[list[object]] = []
    raw: dict[str, Any] = {}
    for eps in PLAN_EPSILONS:
        predicted = simulate_accuracy(
            X[public],
            y[public],
            n=Xp.shape[0],
            mechanism=MECHANISM,
            epsilon=eps,
            delta=0.0,
            loss="logistic",
            regularization=DEFAULT_LAMBDA,
            params={},
            repeats=repeats,
            rng=rng,
        )
        actual = [
            accuracy(
                Xte
                @ np.asarray(
                    fit(Xp, yp, MECHANISM, epsilon=eps, regularization=DEFAULT_LAMBDA, rng=rng).coef
                ),
                yte,
            )
            for _ in range(repeats)
        ]
        p10, p90 = np.quantile(predicted, [0.1, 0.9])
        rows.append(
            [
                f"{eps:g}",
                mean_se(predicted),
                f"[{p10:.4f}, {p90:.4f}]",
                mean_se(actual),
                f"{np.mean(predicted) - np.mean(actual):+.4f}",
            ]
        )
        raw[repr(eps)] = {"predicted": list(predicted), "actual": actual}
        print(rows[-1], flush=True)
    return rows, raw


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few repetitions (smoke test)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    _keep = limit_threads(args.threads or None)
    started = time.perf_counter()
    load_before = load_average()
    repeats = 2 if args.quick else 10
    rng = np.random.default_rng(2026)
    tune_rows: list[list[object]] = []
    raw: dict[str, Any] = {"tuning": {}}
    for name, loader in (("Adult", adult), ("breast cancer", breast_cancer)):
        rows, r = tuning(name, loader(), repeats, rng)
        tune_rows += rows
        raw["tuning"][name] = r
    eval_rows, raw["evaluation"] = evaluation(repeats * 10, rng)
    plan_rows, raw["planner"] = planner(repeats, rng)
    lines = [
        "## Private evaluation, private tuning and the planner (issue 16)",
        "",
        environment(args.threads or None),
        "",
        f"### Private tuning ({MECHANISM}, candidates {', '.join(f'{c:g}' for c in CANDIDATES)};"
        f" {repeats} repetitions; test accuracy)",
        "",
        markdown_table(
            [
                "data",
                "ε",
                "tuned (total ε)",
                "best fixed λ (hindsight)",
                "default λ = 1e-3",
                "λ chosen",
            ],
            tune_rows,
        ),
        "",
        f"### Private evaluation on Adult test (n = 15,060; {repeats * 10} releases per ε)",
        "",
        markdown_table(
            [
                "ε_eval",
                "true accuracy",
                "mean abs error",
                "RMSE",
                "max abs error",
                "95 % interval coverage",
                "mean width",
                "AUC (DP)",
            ],
            eval_rows,
        ),
        "",
        f"### Planner on Adult: public sample of 10,162 rows predicts fits on 20,000 private "
        f"rows ({repeats} draws each)",
        "",
        markdown_table(
            [
                "ε",
                "predicted accuracy",
                "predicted 10–90 %",
                "actual accuracy",
                "predicted − actual",
            ],
            plan_rows,
        ),
        "",
    ]
    save_report(
        "private_eval_tuning",
        lines,
        raw,
        [],
        started=started,
        load_before=load_before,
        quick=args.quick,
        copy_figures=False,
    )
    del _keep
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
