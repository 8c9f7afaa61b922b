"""Accuracy at small ε on Adult: PrivFit's objective and output perturbation next to diffprivlib.

The same design matrix (``benchmarks.adult.design``: public spec, rows clipped into the unit
ball, so data_norm = 1, intercept a column) is given to every contender, in one process, at
the same λ:

* PrivFit ``objective_perturbation`` and ``output_perturbation``, logistic loss,
  J(w) = (1/n)Σ l(y wᵀx) + (λ/2)‖w‖² (the design is prepared once, ``prepare_design``);
* ``diffprivlib.models.LogisticRegression(epsilon=ε, data_norm=1, C=1/(nλ),
  fit_intercept=False)`` (Chaudhuri et al. 2011's objective perturbation; ``C = 1/(nλ)`` makes
  its objective n·J).

Each repetition fits the three back to back. The report gives test accuracy, mean ± standard
error over the repetitions, PrivFit OP − diffprivlib with the standard error of the paired
difference, the majority-class rate and the non-private accuracy.

Run from the repository root::

    .venv/bin/python -m benchmarks.bench_accuracy_small_eps                  # ~5 min, 2 cores
    .venv/bin/python -m benchmarks.bench_accuracy_small_eps --quick          # smoke run
    .venv/bin/python -m benchmarks.bench_accuracy_small_eps --json out.json  # raw figures too
    .venv/bin/python -m benchmarks.bench_accuracy_small_eps --repeats 150 --epsilons 0.05 0.1 \
        --lambdas 0.001                                                      # one region, closer
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks._common import (
    accuracy,
    environment,
    fit_diffprivlib,
    limit_threads,
    load_average,
    markdown_table,
)

FloatArray = NDArray[np.float64]

EPSILONS: tuple[float, ...] = (0.02, 0.05, 0.1, 0.5)
LAMBDAS: tuple[float, ...] = (1e-3, 1e-2)
REPEATS = 25
CONTENDERS: tuple[str, ...] = ("PrivFit OP", "PrivFit output", "diffprivlib")


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=np.float64)
    se = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else 0.0
    return float(arr.mean()), se


def run(
    *, epsilons: Sequence[float], lambdas: Sequence[float], repeats: int, seed: int = 7
) -> dict[str, Any]:
    """Accuracies per λ, ε and contender (lists over the repetitions, paired by index)."""
    from benchmarks.adult import design
    from service.dp import fit, prepare_design

    X, y, _ = design("train")
    Xte, yte, _ = design("test")
    prepared = prepare_design(X, y)
    majority = 1.0 if np.mean(y > 0) >= 0.5 else -1.0
    out: dict[str, Any] = {
        "n": int(X.shape[0]),
        "d": int(X.shape[1]),
        "majority_accuracy": float(np.mean(yte == majority)),
        "lambdas": {},
    }
    rng = np.random.default_rng(seed)
    for lam in lambdas:
        w0 = np.asarray(fit(prepared, None, "non_private", epsilon=1.0, regularization=lam).coef)
        per_lam: dict[str, Any] = {"non_private": accuracy(Xte @ w0, yte), "epsilons": {}}
        for eps in epsilons:
            cell: dict[str, list[float]] = {name: [] for name in CONTENDERS}
            t0 = time.perf_counter()
            for _ in range(repeats):
                for name, mechanism in (
                    ("PrivFit OP", "objective_perturbation"),
                    ("PrivFit output", "output_perturbation"),
                ):
                    res = fit(prepared, None, mechanism, epsilon=eps, regularization=lam, rng=rng)
                    cell[name].append(accuracy(Xte @ np.asarray(res.coef), yte))
                peer = fit_diffprivlib(
                    X, y, epsilon=eps, lam=lam, seed=int(rng.integers(2**31 - 1))
                )
                cell["diffprivlib"].append(accuracy(Xte @ peer.coef, yte))
            summary = ", ".join(
                "{} {:.4f} ± {:.4f}".format(name, *mean_se(cell[name])) for name in CONTENDERS
            )
            print(f"λ={lam:g} ε={eps:g}: {summary} ({time.perf_counter() - t0:.0f} s)", flush=True)
            per_lam["epsilons"][repr(eps)] = cell
        out["lambdas"][repr(lam)] = per_lam
    return out


def report(raw: dict[str, Any]) -> str:
    lines: list[str] = []
    for lam, per_lam in raw["lambdas"].items():
        rows = []
        for eps, cell in per_lam["epsilons"].items():
            row = [eps]
            row += ["{:.4f} ± {:.4f}".format(*mean_se(cell[name])) for name in CONTENDERS]
            diff = np.asarray(cell["PrivFit OP"]) - np.asarray(cell["diffprivlib"])
            row.append("{:+.4f} ± {:.4f}".format(*mean_se(list(diff))))
            row.append(str(len(cell["PrivFit OP"])))
            rows.append(row)
        lines.append(
            f"λ = {lam}, Adult n = {raw['n']}, d = {raw['d']}; majority class "
            f"{raw['majority_accuracy']:.4f}, non-private {per_lam['non_private']:.4f}"
        )
        lines.append("")
        lines.append(markdown_table(["ε", *CONTENDERS, "OP − diffprivlib", "runs"], rows))
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="two ε, one λ, 2 repetitions")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--epsilons", type=float, nargs="+", default=None, help="ε values")
    parser.add_argument("--lambdas", type=float, nargs="+", default=None, help="λ values")
    parser.add_argument("--json", type=Path, default=None, help="write the raw results here")
    parser.add_argument("--threads", type=int, default=1, help="native threads (0: default)")
    args = parser.parse_args(argv)
    controller = limit_threads(args.threads or None)
    started, load_before = time.perf_counter(), load_average()
    raw = run(
        epsilons=args.epsilons or ((0.05, 0.5) if args.quick else EPSILONS),
        lambdas=args.lambdas or ((1e-3,) if args.quick else LAMBDAS),
        repeats=args.repeats or (2 if args.quick else REPEATS),
    )
    raw["environment"] = environment(args.threads or None)
    print()
    print(report(raw))
    print(
        f"Run time {time.perf_counter() - started:.0f} s; load average before {load_before}, "
        f"after {load_average()}; {raw['environment']}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(raw, indent=1) + "\n", encoding="utf-8")
    del controller
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
