"""Linear regression (issue 29): PrivFit next to diffprivlib, side by side in one process.

Data (:mod:`benchmarks.datasets29`): Adult re-targeted to hours per week, a numeric label with the
public bounds [1, 99] (30,162 train / 15,060 test rows), predicted from the other 12 columns and
income. PrivFit's design matrix has rows in the unit ball with an intercept column and the label
mapped onto [−1, 1]; diffprivlib gets the same encoded features before the row-norm step (every
entry in [0, 1], ``bounds_X = (0, 1)``) and the label in hours (``bounds_y = (1, 99)``).

Contenders at ε ∈ {0.1, 0.5, 1, 5}:

* PrivFit ``adassp`` (AdaSSP, Wang 2018; (ε, δ)-DP with δ = 10⁻⁶ < 1/n),
  ``objective_perturbation`` and ``output_perturbation`` with the Huber loss (pure ε-DP, the
  default width h = ½), ``task="regression"``, at the service's task-aware automatic λ
  (:func:`benchmarks._tasks29.privfit_lambda`); and **PrivFit auto** at δ = 10⁻⁶ and at
  δ = 0, the mechanism, loss and λ ``mechanism: "auto"`` resolves to
  (:func:`benchmarks._tasks29.privfit_auto`), fitted with its own draws. For each, the
  service's expected band on a public reference (the published test split) says whether the
  fit would carry the ``worse_than_mean_baseline`` warning.
* diffprivlib 0.6.6 ``LinearRegression`` (the functional mechanism, ε-DP, its intercept fitted
  from a private mean), predictions clipped to the public bounds like PrivFit's; the same fit
  unclipped is shown too (no time: it is the same fit).
* scikit-learn's ``LinearRegression`` (non-private, on PrivFit's matrix) and the training mean
  (non-private yardsticks, computed once).

Every prediction of PrivFit is v = 1 + (clip(wᵀx, −1, 1) + 1)/2 · 98 hours (the contract's map
back). Test RMSE in hours, mean ± standard error over the repetitions, and fit times (median
seconds; ratios are medians of per-run ratios to diffprivlib's, one native thread each).

Run: ``.venv/bin/python -m benchmarks.bench_regression [--quick] [--reps N] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks import datasets29
from benchmarks._common import OUT_DIR, environment, limit_threads, load_average, timed
from benchmarks._tasks29 import (
    EPSILONS,
    LambdaChoice,
    Tally,
    dp_source,
    privfit_auto,
    privfit_lambda,
    privfit_refusal,
    service_band,
    timed_privfit,
    write_json,
)

FloatArray = NDArray[np.float64]

#: name -> (mechanism, loss, δ)
PRIVFIT: dict[str, tuple[str, str, float]] = {
    "PrivFit AdaSSP": ("adassp", "squared", 1e-6),
    "PrivFit OP (Huber)": ("objective_perturbation", "huber", 0.0),
    "PrivFit output (Huber)": ("output_perturbation", "huber", 0.0),
    "PrivFit auto (δ = 1e-6)": ("auto", "", 1e-6),
    "PrivFit auto (δ = 0)": ("auto", "", 0.0),
}
DPL = "diffprivlib"
DPL_RAW = "diffprivlib unclipped"
SKLEARN = "scikit-learn (non-private)"
MEAN = "training mean"
CONTENDERS = (*PRIVFIT, DPL, DPL_RAW, SKLEARN, MEAN)
QUICK_ROWS = (3000, 1500)
QUICK_REPS = 3


def rmse(pred: FloatArray, v: FloatArray) -> float:
    return float(np.sqrt(np.mean((np.asarray(pred, dtype=np.float64) - v) ** 2)))


def privfit_run(
    data: datasets29.RegressionData,
    mechanism: str,
    *,
    loss: str,
    epsilon: float,
    delta: float,
    lam: float,
    rng: np.random.Generator,
    params: dict[str, Any] | None = None,
) -> tuple[float, float]:
    """One PrivFit fit: test RMSE in the label's units and fit seconds."""
    scores, seconds = timed_privfit(
        data,
        mechanism,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        regularization=lam,
        task="regression",
        n_classes=1,
        rng=rng,
        params=params,
    )
    return rmse(datasets29.hours_from_unit(scores, data.bounds), data.v_test), seconds


def fit_diffprivlib(data: datasets29.RegressionData, *, epsilon: float, seed: int) -> Any:
    """diffprivlib's ε-DP linear regression with public bounds; the model and fit seconds."""
    from diffprivlib.models import LinearRegression

    d = data.X_raw.shape[1]
    model = LinearRegression(
        epsilon=epsilon,
        bounds_X=(np.zeros(d), np.ones(d)),
        bounds_y=data.bounds,
        fit_intercept=True,
        random_state=seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        _, seconds, _ = timed(lambda: model.fit(data.X_raw, data.v))
    return model, seconds


def run_dataset(
    data: datasets29.RegressionData, epsilons: Sequence[float], reps: int, *, seed: int = 29
) -> tuple[Tally, dict[str, Any]]:
    from sklearn.linear_model import LinearRegression

    X, y = data.X, data.y
    n, d = X.shape
    lower, upper = data.bounds
    tally = Tally(CONTENDERS, "RMSE", higher_is_better=False)
    rng = np.random.default_rng(seed)
    sk = LinearRegression(fit_intercept=False)
    _, sk_seconds, _ = timed(lambda: sk.fit(X, y))
    sk_rmse = rmse(datasets29.hours_from_unit(sk.predict(data.X_test), data.bounds), data.v_test)
    mean_rmse = rmse(np.full(data.v_test.shape, float(np.mean(data.v))), data.v_test)
    # the public reference of the service's expected band: the published test split (label
    # mapped onto [−1, 1] as the service maps bounds), as a site that uploaded it with
    # allow_non_private would have it
    reference_y = (np.clip(data.v_test, lower, upper) - lower) / (upper - lower) * 2.0 - 1.0

    for eps in epsilons:
        t0 = time.perf_counter()
        lam: dict[str, LambdaChoice] = {}
        config: dict[str, tuple[str, str, float, dict[str, Any]]] = {}
        for name, (mech, loss, delta) in PRIVFIT.items():
            if mech == "auto":
                auto = privfit_auto(
                    task="regression", n_classes=1, n=n, d=d, epsilon=eps, delta=delta
                )
                config[name] = (auto.mechanism, auto.loss, delta, dict(auto.params))
                lam[name] = LambdaChoice(auto.regularization, f"auto → {auto.mechanism}")
                continue
            config[name] = (mech, loss, delta, {})
            lam[name] = privfit_lambda(
                mech, n=n, d=d, epsilon=eps, delta=delta, loss=loss, task="regression", n_classes=1
            )
        tally.lambdas[eps] = {name: f"{c.value:.3g} ({c.source})" for name, c in lam.items()}
        for name, (mech, loss, delta, params) in config.items():
            reason = privfit_refusal(
                mech,
                n=n,
                d=d,
                epsilon=eps,
                delta=delta,
                loss=loss,
                regularization=lam[name].value,
                task="regression",
                n_classes=1,
                params=params,
            )
            if reason is not None:
                tally.unavailable[name] = reason
                continue
            band = service_band(
                mech,
                reference_X=data.X_test,
                reference_y=reference_y,
                task="regression",
                n_classes=1,
                n=n,
                epsilon=eps,
                delta=delta,
                loss=loss,
                regularization=lam[name].value,
                params=params,
                half_range=(upper - lower) / 2.0,
            )
            tally.add_band(eps, name, band)
        for _ in range(reps):
            run_seed = int(rng.integers(2**31))
            for name, (mech, loss, delta, params) in config.items():
                if name not in tally.unavailable:
                    run = partial(
                        privfit_run,
                        data,
                        mech,
                        loss=loss,
                        epsilon=eps,
                        delta=delta,
                        lam=lam[name].value,
                        rng=rng,
                        params=params,
                    )
                    tally.run(eps, name, run)
            try:
                model, seconds = fit_diffprivlib(data, epsilon=eps, seed=run_seed)
            except Exception as exc:  # reported in the output
                tally.failures.setdefault(DPL, []).append(f"ε={eps:g}: {exc!r}")
            else:
                pred = np.asarray(model.predict(data.X_raw_test), dtype=np.float64)
                tally.add(eps, DPL, rmse(np.clip(pred, lower, upper), data.v_test), seconds)
                tally.add(eps, DPL_RAW, rmse(pred, data.v_test), None)
        tally.add(eps, SKLEARN, sk_rmse, sk_seconds)
        tally.add(eps, MEAN, mean_rmse, None)
        print(
            f"{data.name} ε={eps:g}: "
            + ", ".join(f"{c} {tally.cell(eps, c, 2)}" for c in CONTENDERS)
            + f" ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    info = {
        "n": n,
        "d": d,
        "n_test": int(data.X_test.shape[0]),
        "bounds": list(data.bounds),
        "prep": data.preprocessing,
        "label_sd_test": float(np.std(data.v_test)),
    }
    return tally, info


def report(tally: Tally, info: dict[str, Any], reps: int) -> list[str]:
    timed_names = [c for c in (*PRIVFIT, DPL) if c not in tally.unavailable]
    return [
        f"### adult-hours: n = {info['n']:,}, d = {info['d']}, {info['n_test']:,} test rows, "
        f"label bounds {info['bounds']}, {reps} repetitions",
        "",
        f"Preprocessing: {info['prep']}.",
        "",
        "Test RMSE in hours (mean ± standard error; predictions clipped to the public bounds "
        "except in the unclipped column):",
        "",
        tally.metric_table(digits=2),
        "",
        "Fit time (median seconds) and ratio to diffprivlib:",
        "",
        tally.time_table(timed_names, DPL),
        "",
        "PrivFit's λ:",
        "",
        tally.lambda_table(),
        "",
        "The service's expected RMSE in hours (band mean, 4 simulated fits on the public "
        "reference) and its warning (**warns**: the fit would carry `worse_than_mean_baseline`):",
        "",
        tally.band_table(digits=2),
        "",
        *tally.verdict(list(PRIVFIT), [DPL], MEAN),
        *tally.failure_lines(),
        "",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {QUICK_REPS} repetitions, {QUICK_ROWS[0]} training and "
        f"{QUICK_ROWS[1]} test rows",
    )
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--epsilons", type=float, nargs="*", default=list(EPSILONS))
    parser.add_argument("--threads", type=int, default=1, help="native threads (0: default)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        import diffprivlib  # noqa: F401
    except ImportError:
        print("diffprivlib is not installed: install the bench extra (pip install -e '.[bench]')")
        return 2
    limits = limit_threads(args.threads or None)  # kept alive until the end
    reps = QUICK_REPS if args.quick else args.reps
    started, load_before = time.perf_counter(), load_average()
    data = datasets29.adult_hours()
    if args.quick:
        data = datasets29.subsample(data, *QUICK_ROWS)
    tally, info = run_dataset(data, args.epsilons, reps)
    lines = ["## Linear regression (issue 29)", "", *report(tally, info, reps)]
    lines.append(
        f"{environment(args.threads or None)}; {dp_source()}. Total run time "
        f"{time.perf_counter() - started:.0f} s; load average before {load_before}, after "
        f"{load_average()}."
    )
    text = "\n".join(lines)
    print()
    print(text)
    raw = {
        "reps": reps,
        "quick": args.quick,
        "datasets": {"adult-hours": {**info, **tally.raw()}},
        "environment": environment(args.threads or None),
        "dp_source": dp_source(),
    }
    write_json(args.json or OUT_DIR / f"bench_regression{'_quick' if args.quick else ''}.json", raw)
    del limits
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
