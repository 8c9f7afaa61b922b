"""Private selection of λ on Adult (issue 28 item 2): random repetition (Papernot–Steinke 2022,
Liu–Talwar 2019) against CMS 2011, the default λ and the best λ in hindsight.

Objective perturbation on Adult's training split, test accuracy on its test split. For each ε:

* every fixed λ of the grid fitted on all rows at the full ε (``repeats`` times): the default
  λ = 1e-3 and the best λ in hindsight (the grid value with the best mean test accuracy);
* the privately tuned fit over the grid with each selection method (total cost ε, what the
  tuned-fit job does, :func:`service.dp.analysis.selection.tune`): ``cms``,
  ``papernot_steinke`` (what ``auto`` chooses here) and, with ``--lt``, ``liu_talwar``.

Mean ± standard error over the repetitions.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.bench_selection [--repeats 8] [--quick]``.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks._common import accuracy, environment, load_average, markdown_table, save_report

GRID: tuple[float, ...] = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
SMALL_GRID: tuple[float, ...] = (1e-4, 1e-3, 1e-2)
DEFAULT_LAMBDA = 1e-3
EPSILONS: tuple[float, ...] = (0.5, 1.0)
MECHANISM = "objective_perturbation"


def mean_se(values: Sequence[float]) -> str:
    arr = np.asarray(values, dtype=np.float64)
    se = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else 0.0
    return f"{arr.mean():.4f} ± {se:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--lt", action="store_true", help="also Liu–Talwar")
    args = parser.parse_args()
    repeats = 2 if args.quick else args.repeats
    from benchmarks.adult import design
    from service.dp import fit
    from service.dp.analysis.selection import choose_selection, tune
    from service.dp.data.prepared import PreparedDesign, prepare_design

    started, load_before = time.perf_counter(), load_average()
    X, y, _ = design("train")
    Xte, yte, _ = design("test")
    prepared = prepare_design(X, y)
    n, d = prepared.n, int(X.shape[1])
    rng = np.random.default_rng(2028)
    rows: list[list[object]] = []
    raw: dict[str, Any] = {}
    methods = ["cms", "papernot_steinke"] + (["liu_talwar"] if args.lt else [])
    for eps in EPSILONS:
        fixed: dict[float, list[float]] = {lam: [] for lam in GRID}
        for _ in range(repeats):
            for lam in GRID:
                res = fit(prepared, None, MECHANISM, epsilon=eps, regularization=lam, rng=rng)
                fixed[lam].append(accuracy(Xte @ np.asarray(res.coef), yte))
        best = max(GRID, key=lambda lam: float(np.mean(fixed[lam])))
        raw[repr(eps)] = {"fixed": {repr(k): v for k, v in fixed.items()}}
        for grid in (GRID, SMALL_GRID):
            auto = choose_selection(
                "auto",
                k=len(grid),
                n=n,
                d=d,
                epsilon=eps,
                delta=0.0,
                min_regularization=min(grid),
                repetition_possible=True,
            ).method
            for method in methods:
                accs: list[float] = []
                chosen: list[float] = []
                for _ in range(repeats):

                    def fit_one(part: PreparedDesign, lam: float, eps: float = eps) -> Any:
                        return fit(part, None, MECHANISM, epsilon=eps, regularization=lam, rng=rng)

                    def fit_at(full: PreparedDesign, lam: float, eps_t: float) -> Any:
                        return fit(
                            full, None, MECHANISM, epsilon=eps_t, regularization=lam, rng=rng
                        )

                    result = tune(
                        prepared,
                        grid,
                        epsilon=eps,
                        fit_one=fit_one,
                        fit_at=fit_at,
                        method=method,
                        rng=rng,
                    )
                    accs.append(accuracy(Xte @ np.asarray(result.result.coef), yte))
                    chosen.append(grid[result.chosen])
                counts = ", ".join(
                    f"{lam:g}: {chosen.count(lam)}" for lam in grid if chosen.count(lam)
                )
                rows.append(
                    [
                        f"{eps:g}",
                        len(grid),
                        method + (" (auto)" if method == auto else ""),
                        mean_se(accs),
                        mean_se(fixed[DEFAULT_LAMBDA]),
                        f"{mean_se(fixed[best])} (λ = {best:g})",
                        counts,
                    ]
                )
                raw[repr(eps)][f"{method}_{len(grid)}"] = {"accuracy": accs, "chosen": chosen}
                print(rows[-1], flush=True)
    lines = [
        "## Private selection of λ (issue 28 item 2): random repetition vs CMS",
        "",
        f"Adult (n = {n}, d = {d}), {MECHANISM}, test accuracy, {repeats} repetitions, "
        f"mean ± s.e.; grid {', '.join(f'{g:g}' for g in GRID)} (k = 7) and "
        f"{', '.join(f'{g:g}' for g in SMALL_GRID)} (k = 3); default and best-in-hindsight "
        "are fixed λ fitted on all rows at the full ε.",
        "",
        markdown_table(
            [
                "ε",
                "k",
                "selection",
                "tuned (total ε)",
                "λ = 1e-3",
                "best λ in hindsight",
                "chosen λ (count)",
            ],
            rows,
        ),
        "",
        environment(),
        "",
    ]
    save_report(
        "bench_selection",
        lines,
        raw,
        [],
        started=started,
        load_before=load_before,
        quick=args.quick,
        copy_figures=False,
    )


if __name__ == "__main__":
    main()
