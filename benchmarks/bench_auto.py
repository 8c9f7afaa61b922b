"""How well ``"mechanism": "auto"`` picks (issue 28 items 3–5), on Adult and breast cancer.

For each ε, every auto candidate (mechanism × λ of :mod:`service.dp.analysis.auto`) is fitted
``--repeats`` times on the real training rows and scored on the real test rows. Reported:

* ``auto (synthetic)``: the candidate the chooser picks from public inputs alone (n, d, ε, δ,
  loss) with the synthetic reference, and its real test accuracy;
* ``auto (public ref.)``: the pick when the site has public reference rows of the same spec
  (here: ``--public-rows`` rows held out of the training file, never fitted on privately);
* ``best in hindsight``: the best candidate on the real test set (not a private choice);
* ``default``: objective perturbation at λ = 1e-3 (the examples' setting); majority class;
* ``expected``: the chooser's predicted mean for its pick (synthetic reference at the baseline).

Standard errors are over the repetitions (noise draws of the real fits). Breast cancer
(scikit-learn, 569 rows, 30 features, min–max scaled on its own training split, intercept,
rows clipped to norm 1) is not used to calibrate the synthetic reference.

    PYTHONPATH=. python benchmarks/bench_auto.py --repeats 8
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.dp import fit as dp_fit
from service.dp.analysis import auto, auto_simulation
from service.dp.multisite.transfer import transfer_fit

FloatArray = NDArray[np.float64]


def _adult() -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    from benchmarks.adult import design

    Xtr, ytr, _ = design("train")
    Xte, yte, _ = design("test")
    return Xtr, ytr, Xte, yte


def _breast_cancer() -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X = np.asarray(data.data, dtype=np.float64)
    y = np.where(data.target == 1, 1.0, -1.0)
    rng = np.random.default_rng(569)
    order = rng.permutation(X.shape[0])
    train, test = order[:400], order[400:]
    lo, hi = X[train].min(axis=0), X[train].max(axis=0)
    scale = np.where(hi > lo, hi - lo, 1.0)

    def prep(rows: NDArray[np.intp]) -> FloatArray:
        Z = np.clip((X[rows] - lo) / scale, 0.0, 1.0)
        Z = np.hstack([Z, np.ones((Z.shape[0], 1))])
        out: FloatArray = Z / np.maximum(1.0, np.linalg.norm(Z, axis=1, keepdims=True))
        return out

    return prep(train), y[train], prep(test), y[test]


def _accuracy(model: Any, X: FloatArray, y: FloatArray) -> float:
    return float(np.mean((model.decision_function(X) > 0) == (y > 0)))


def _mean_se(values: Sequence[float]) -> str:
    a = np.asarray(values)
    se = a.std(ddof=1) / math.sqrt(a.size) if a.size > 1 else 0.0
    return f"{a.mean():.3f} ± {se:.3f}"


def run(
    name: str,
    data: tuple[FloatArray, FloatArray, FloatArray, FloatArray],
    epsilons: Sequence[float],
    repeats: int,
    delta: float,
    public_rows: int,
) -> list[str]:
    Xtr, ytr, Xte, yte = data
    rng = np.random.default_rng(28)
    order = rng.permutation(Xtr.shape[0])
    pub, priv = order[:public_rows], order[public_rows:]
    Xp, yp = Xtr[pub], ytr[pub]
    Xtr, ytr = Xtr[priv], ytr[priv]
    n, d = Xtr.shape
    majority = max(np.mean(yte > 0), np.mean(yte < 0))
    lines = [
        f"### {name}: n = {n}, d = {d}, δ = {delta:g}, test majority {majority:.3f}, "
        f"{repeats} repetitions",
        "",
        "| ε | auto (synthetic): pick | its accuracy | expected | auto (public ref.): pick "
        "| its accuracy | best in hindsight | default OP λ=1e-3 | chooser s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for eps in epsilons:
        t0 = time.perf_counter()
        synthetic = auto.choose(
            n=n, d=d, epsilon=eps, delta=delta, loss="logistic", regularization=None
        )
        seconds = time.perf_counter() - t0
        public = auto.choose(
            n=n,
            d=d,
            epsilon=eps,
            delta=delta,
            loss="logistic",
            regularization=None,
            majority=auto_simulation.majority_fraction(yp),
            public=(Xp, yp),
            public_key=f"{name}-public",
        )
        scores: dict[tuple[str, float], list[float]] = {}
        for figure in synthetic.figures:
            if figure.excluded is not None:
                continue
            c = figure.candidate
            accs = []
            for r in range(repeats):
                result = dp_fit(
                    Xtr,
                    ytr,
                    c.mechanism,
                    epsilon=eps,
                    delta=delta,
                    regularization=c.regularization,
                    rng=np.random.default_rng([r, int(eps * 1e6)]),
                    **c.params,
                )
                accs.append(_accuracy(result.model, Xte, yte))
            scores[(c.mechanism, c.regularization)] = accs
        if public.chosen.mechanism == auto_simulation.TRANSFER:
            # the public pick is a transfer towards the public rows' own model
            source = auto_simulation.public_source(Xp, yp, "logistic")
            eta = float(public.chosen.params["transfer_strength"])
            key = (f"transfer η={eta:g}", public.chosen.regularization)
            scores[key] = [
                _accuracy(
                    transfer_fit(
                        Xtr,
                        ytr,
                        source,
                        epsilon=eps,
                        transfer_strength=eta,
                        regularization=public.chosen.regularization,
                        rng=np.random.default_rng([r, int(eps * 1e6)]),
                    ).model,
                    Xte,
                    yte,
                )
                for r in range(repeats)
            ]
            pick_p = key
        else:
            pick_p = (public.chosen.mechanism, public.chosen.regularization)
        best_key = max(
            (k for k in scores if not k[0].startswith("transfer")),
            key=lambda k: float(np.mean(scores[k])),
        )
        pick = (synthetic.chosen.mechanism, synthetic.chosen.regularization)
        expected = next(f for f in synthetic.figures if f.candidate == synthetic.chosen).mean
        default = scores.get(("objective_perturbation", 1e-3), [math.nan])
        lines.append(
            f"| {eps:g} | {pick[0]} λ={pick[1]:g} | {_mean_se(scores[pick])} | {expected:.3f} "
            f"| {pick_p[0]} λ={pick_p[1]:g} | {_mean_se(scores[pick_p])} "
            f"| {_mean_se(scores[best_key])} ({best_key[0]} λ={best_key[1]:g}) "
            f"| {_mean_se(default)} | {seconds:.1f} |"
        )
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.05, 0.1, 0.5, 1.0])
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--public-rows", type=int, default=1000)
    parser.add_argument("--datasets", nargs="+", default=["adult", "breast_cancer"])
    args = parser.parse_args()
    loaders = {"adult": _adult, "breast_cancer": _breast_cancer}
    out: list[str] = []
    for name in args.datasets:
        public_rows = args.public_rows if name == "adult" else min(args.public_rows, 100)
        out += run(name, loaders[name](), args.epsilons, args.repeats, args.delta, public_rows)
        out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
