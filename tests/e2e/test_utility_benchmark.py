"""``benchmarks.bench_utility`` (issue 28) still runs end to end in its ``--quick`` mode on the
two small data sets: one row per (data set, ε) with every column, accuracies in [0, 1], and
the auto λ the rule gives for the data set's n and d. The figures are judged in
benchmarks/RESULTS.md, not here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from service.dp.analysis.regularization import auto_regularization

# Heavy tier (issue 27 §5): this runs a benchmark script end to end, which checks the script,
# not the service (every code path it drives has its own tests); CI runs it in `make test-heavy`.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.heavy,
    # diffprivlib 0.6.6 passes L-BFGS-B options that recent SciPy deprecates
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


def test_the_utility_benchmark_runs_quick(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("diffprivlib", reason="the bench extra is not installed")
    from benchmarks import bench_utility as bench

    out = tmp_path / "utility.json"
    args = ["--quick", "--datasets", "breast_cancer", "digits_5to9", "--json", str(out)]
    assert bench.main(args) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["dataset"], r["epsilon"]) for r in rows] == [
        ("breast_cancer", 0.1),
        ("breast_cancer", 1.0),
        ("digits_5to9", 0.1),
        ("digits_5to9", 1.0),
    ]
    for row in rows:
        assert set(row["results"]) == set(bench.COLUMNS)
        for mean, se in row["results"].values():
            assert 0.0 <= mean <= 1.0
            assert math.isfinite(se)
        expected = auto_regularization(
            "objective_perturbation", n=row["n"], d=row["d"], epsilon=row["epsilon"]
        ).regularization
        assert row["auto_lambda"] == expected
    assert "| data (n, d) | ε | auto δ=0 | auto δ=1e-05 | auto λ (OP) | tuned |" in (
        capsys.readouterr().out
    )
