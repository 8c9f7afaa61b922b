"""Multinomial against one-vs-rest for PrivFit's multi-class fits (issue 29), at equal ε.

* **multinomial**: one objective-perturbation (or output-perturbation) release of the K × d
  softmax model at the whole ε (:mod:`service.dp.mechanisms.multiclass`);
* **one-vs-rest**: K binary fits of the same mechanism, class k against the rest (labels ±1),
  each at ε/K (every record is in each of the K fits: basic composition), predicting the class
  with the largest score.

Data: Adult re-targeted to marital status (7 classes, :func:`benchmarks.datasets29.
adult_marital`), trained on the published train split and scored on the test split.

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_multiclass_ovr --reps 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from service.dp import fit


def _ovr_scores(
    X: np.ndarray, y: np.ndarray, K: int, mechanism: str, eps: float, lam: float, rng: object
) -> np.ndarray:
    coefs = []
    for k in range(K):
        yk = np.where(y == k, 1.0, -1.0)
        r = fit(X, yk, mechanism, epsilon=eps / K, regularization=lam, rng=rng)  # type: ignore[arg-type]
        if r.coef is None:
            raise RuntimeError(f"{mechanism} released no coefficient vector")
        coefs.append(r.coef)
    return np.stack(coefs)


def main() -> None:
    from benchmarks.datasets29 import adult_marital

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--lam", type=float, nargs="+", default=[1e-4, 1e-3, 1e-2])
    parser.add_argument(
        "--mechanisms", nargs="+", default=["objective_perturbation", "output_perturbation"]
    )
    args = parser.parse_args()
    data = adult_marital()
    X, y, Xt, yt = data.X, data.y, data.X_test, data.y_test
    K = data.n_classes
    majority = float(np.max(np.bincount(yt.astype(int), minlength=K)) / yt.size)
    print(
        f"Adult marital status: n = {X.shape[0]}, d = {X.shape[1]}, K = {K}, "
        f"test {Xt.shape[0]} rows, majority {majority:.4f}, ε = {args.epsilon}"
    )
    exact = fit(
        X, y, "non_private", epsilon=1.0, regularization=1e-4, task="multiclass", n_classes=K
    )
    print(f"non-private multinomial λ = 1e-4: {np.mean(exact.model.predict(Xt) == yt):.4f}")  # type: ignore[attr-defined]
    rng = np.random.default_rng(2026)
    for mechanism in args.mechanisms:
        for lam in args.lam:
            multi, ovr, t_multi, t_ovr = [], [], 0.0, 0.0
            for _ in range(args.reps):
                t0 = time.perf_counter()
                r = fit(
                    X,
                    y,
                    mechanism,
                    epsilon=args.epsilon,
                    regularization=lam,
                    task="multiclass",
                    n_classes=K,
                    rng=rng,
                )
                t_multi += time.perf_counter() - t0
                multi.append(float(np.mean(r.model.predict(Xt) == yt)))  # type: ignore[attr-defined]
                t0 = time.perf_counter()
                W = _ovr_scores(X, y, K, mechanism, args.epsilon, lam, rng)
                t_ovr += time.perf_counter() - t0
                ovr.append(float(np.mean(np.argmax(Xt @ W.T, axis=1) == yt)))
            print(
                f"{mechanism:24s} λ = {lam:g}: multinomial {np.mean(multi):.4f} "
                f"± {np.std(multi):.4f} ({t_multi / args.reps:.2f} s), one-vs-rest "
                f"{np.mean(ovr):.4f} ± {np.std(ovr):.4f} ({t_ovr / args.reps:.2f} s)"
            )


if __name__ == "__main__":
    main()
