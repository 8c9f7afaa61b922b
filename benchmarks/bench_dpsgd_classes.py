"""DP-SGD's multi-class defaults (issue 29): the binary defaults against the K-class rule.

Data: Adult re-targeted to marital status (:func:`benchmarks.datasets29.adult_marital`,
K = 7, n = 30,162, d = 101) or, with ``--dataset fashion-mnist``, Fashion-MNIST projected to
64 columns (K = 10, n = 60,000; :mod:`benchmarks.bench_multiclass`'s loader). Two DP-SGD
set-ups at each ε (pure ε-DP, λ = 10⁻³ as in :mod:`benchmarks.bench_multiclass`):

* ``binary defaults``: one pass, b = 50, η = 1, ``inverse_sqrt`` (the options given
  explicitly, i.e. the multi-class default before the rule);
* ``K-class defaults``: ``batch_size`` and ``eta`` omitted, so the rule of
  :func:`service.dp.mechanisms.dp_sgd.multiclass_defaults` picks b = min(n, max(50, ⌈dK/ε⌉))
  and η = √(b/50).

Test accuracy, mean ± standard error over the repetitions, median fit seconds, and the b and
η the rule chose (from the calibration record).

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.bench_dpsgd_classes [--reps N]
[--epsilons ...] [--dataset ...]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks._common import limit_threads
from benchmarks._tasks29 import EPSILONS, mean_se, timed_privfit
from benchmarks.bench_multiclass import DATASETS, load
from service import dp

LAMBDA = 1e-3
SETUPS: dict[str, dict[str, Any]] = {
    "binary defaults (b = 50, η = 1)": {"batch_size": 50, "eta": 1.0},
    "K-class defaults": {},
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--epsilons", type=float, nargs="*", default=list(EPSILONS))
    parser.add_argument("--dataset", default=DATASETS[0], choices=DATASETS)
    args = parser.parse_args(argv)
    limit_threads(1)
    data = load(args.dataset, quick=False)
    n, d = data.X.shape
    K = data.n_classes
    majority = float(np.mean(data.y_test == np.bincount(data.y.astype(np.intp)).argmax()))
    rng = np.random.default_rng(29)
    print(f"{args.dataset}: n = {n}, d = {d}, K = {K}, {args.reps} repetitions, λ = {LAMBDA:g}")
    header = "| ε | " + " | ".join(f"{name} acc. | s" for name in SETUPS)
    print(header + " | rule's b | rule's η | majority class |")
    print("|---" * (2 * len(SETUPS) + 4) + "|")
    for eps in args.epsilons:
        cells: list[str] = []
        for params in SETUPS.values():
            accs, secs = [], []
            for _ in range(args.reps):
                scores, seconds = timed_privfit(
                    data,
                    "dp_sgd",
                    epsilon=eps,
                    delta=0.0,
                    loss="logistic",
                    regularization=LAMBDA,
                    task="multiclass",
                    n_classes=K,
                    rng=rng,
                    params=params,
                )
                accs.append(float(np.mean(np.argmax(scores, axis=1) == data.y_test)))
                secs.append(seconds)
            mean, se = mean_se(accs)
            cells += [f"{mean:.3f} ± {se:.3f}", f"{float(np.median(secs)):.2f}"]
        record = dp.calibrate(
            "dp_sgd",
            n=n,
            d=d,
            epsilon=eps,
            regularization=LAMBDA,
            task="multiclass",
            n_classes=K,
        ).details
        rule = f"{record['batch_size']} | {record['eta']:.3g}"
        print(f"| {eps:g} | " + " | ".join(cells) + f" | {rule} | {majority:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
