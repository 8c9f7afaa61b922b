"""Issue 29's side-by-side benchmarks still run: ``benchmarks.bench_multiclass`` and
``benchmarks.bench_regression`` with ``--quick`` (3 repetitions on a subsample; skipped when the
bench extra, which provides diffprivlib, is not installed), and their data loaders keep the
contract's encodings.

The smoke tests check that each script completes and writes one figure per contender, ε and run
(accuracies in [0, 1], positive finite RMSEs, the yardsticks equal to their definition); they do
not judge the figures (benchmarks/RESULTS.md does).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks import datasets29

# The benchmark scripts are tools (≈ 48 s of CPU: diffprivlib and PrivFit on Adult), not the
# service (every code path they drive has its own tests); CI runs them in `make test-heavy`.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.heavy,
    # diffprivlib 0.6.6 passes L-BFGS-B options that recent SciPy deprecates
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

EPSILONS = ["0.1", "0.5", "1", "5"]


def _check_runs(
    raw: dict[str, Any], names: tuple[str, ...], runs: int, ok: Callable[[float], bool]
) -> None:
    """Every contender — each PrivFit mechanism of the task included — has ``runs`` figures
    per ε (one for a deterministic yardstick) that pass ``ok``; none failed."""
    assert raw["failures"] == {}
    assert raw["unavailable"] == {}
    assert list(raw["values"]) == EPSILONS
    for name in names:
        for eps in EPSILONS:
            values = raw["values"][eps][name]
            assert len(values) in (1, runs), (name, eps)
            assert all(ok(v) for v in values), (name, eps, values)


def test_the_loaders_keep_the_contract_encodings() -> None:
    marital = datasets29.adult_marital()
    assert marital.n_classes == 7
    assert (marital.X.shape[0], marital.X_test.shape[0]) == (30162, 15060)
    assert set(np.unique(marital.y)) == set(range(7))
    assert np.linalg.norm(marital.X, axis=1).max() <= 1.0
    hours = datasets29.adult_hours()
    assert hours.X.shape[1] == hours.X_raw.shape[1] + 1  # the intercept
    assert hours.y.min() >= -1.0
    assert hours.y.max() <= 1.0
    assert hours.X_raw.min() >= 0.0
    assert hours.X_raw.max() <= 1.0
    np.testing.assert_allclose(datasets29.hours_from_unit(hours.y), hours.v, atol=1e-9)
    # the map back is clipped to the public bounds
    assert list(datasets29.hours_from_unit(np.array([-3.0, 0.0, 3.0]))) == [1.0, 50.0, 99.0]


def test_fashion_mnist_absent_is_skipped_with_the_apt_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("diffprivlib", reason="the bench extra is not installed")
    from benchmarks import bench_multiclass

    monkeypatch.setattr(datasets29, "FASHION_DIR", tmp_path)
    out = tmp_path / "mc.json"
    args = ["--quick", "--threads", "0", "--datasets", "fashion-mnist", "--json", str(out)]
    assert bench_multiclass.main(args) == 0
    assert datasets29.FASHION_APT in capsys.readouterr().out
    assert (
        datasets29.FASHION_APT
        in json.loads(out.read_text())["datasets"]["fashion-mnist"]["skipped"]
    )


def test_the_multiclass_benchmark_compares_privfit_with_diffprivlib(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("diffprivlib", reason="the bench extra is not installed")
    from benchmarks import bench_multiclass as bench

    out = tmp_path / "mc.json"
    assert bench.main(["--quick", "--threads", "0", "--json", str(out)]) == 0
    raw = json.loads(out.read_text())
    assert raw["reps"] == bench.QUICK_REPS
    for name in bench.DATASETS:
        cell = raw["datasets"][name]
        if "skipped" in cell:  # Fashion-MNIST not installed: named, not hidden
            assert datasets29.FASHION_APT in cell["skipped"]
            continue
        _check_runs(cell, bench.CONTENDERS, bench.QUICK_REPS, lambda v: 0.0 <= v <= 1.0)
        # the majority class is what it says: the most frequent class is at least 1/K
        assert cell["values"]["1"][bench.MAJORITY][0] > 0.0
        # every PrivFit contender has the service's expected band (and its warning) per ε
        for eps in EPSILONS:
            assert set(cell["bands"][eps]) == set(bench.PRIVFIT)
            assert all(0.0 <= b["mean"] <= 1.0 for b in cell["bands"][eps].values())
    text = capsys.readouterr().out
    assert "| ε | PrivFit OP | PrivFit output | PrivFit DP-SGD | PrivFit auto | diffprivlib" in text
    assert "auto → objective_perturbation" in text


def test_the_regression_benchmark_compares_privfit_with_diffprivlib(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("diffprivlib", reason="the bench extra is not installed")
    from benchmarks import bench_regression as bench

    out = tmp_path / "reg.json"
    assert bench.main(["--quick", "--threads", "0", "--json", str(out)]) == 0
    cell = json.loads(out.read_text())["datasets"]["adult-hours"]
    _check_runs(cell, bench.CONTENDERS, bench.QUICK_REPS, lambda v: math.isfinite(v) and v > 0)
    # predicting the training mean: its RMSE is at least the test labels' sd
    assert cell["values"]["1"][bench.MEAN][0] >= cell["label_sd_test"] - 1e-9
    # clipped predictions can only be closer to labels inside the bounds
    for eps in EPSILONS:
        clipped, raw_rmse = cell["values"][eps][bench.DPL], cell["values"][eps][bench.DPL_RAW]
        assert all(c <= r + 1e-9 for c, r in zip(clipped, raw_rmse, strict=True))
    for eps in EPSILONS:
        assert set(cell["bands"][eps]) == set(bench.PRIVFIT)
    text = capsys.readouterr().out
    assert "| ε | PrivFit AdaSSP | PrivFit OP (Huber)" in text
    # auto: AdaSSP at δ > 0, Huber objective perturbation at δ = 0
    assert "auto → adassp" in text
    assert "auto → objective_perturbation" in text


def test_the_multiclass_benchmark_runs_a_subset_of_contenders(tmp_path: Path) -> None:
    pytest.importorskip("diffprivlib", reason="the bench extra is not installed")
    from benchmarks import bench_multiclass as bench

    out = tmp_path / "mc.json"
    args = ["--quick", "--threads", "0", "--datasets", "adult-marital", "--epsilons", "1"]
    assert bench.main([*args, "--contenders", "PrivFit output", "--json", str(out)]) == 0
    cell = json.loads(out.read_text())["datasets"]["adult-marital"]
    # the chosen contender and the non-private yardsticks, nothing else
    expected = ["PrivFit output", bench.SKLEARN, bench.MAJORITY]
    assert cell["contenders"] == expected
    assert sorted(cell["values"]["1"]) == sorted(expected)
    assert len(cell["values"]["1"]["PrivFit output"]) == bench.QUICK_REPS
    assert list(cell["bands"]["1"]) == ["PrivFit output"]
