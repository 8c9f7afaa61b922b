"""The projection-dimension calibration of issue 28 (``benchmarks.calibrate_projection``) still
runs end to end in its ``--quick`` mode: calibration on one small synthetic family, the choice
of a rule, and an evaluation on breast cancer against diffprivlib. The test checks that the
script completes and writes well-formed files; it does not judge the figures
(benchmarks/RESULTS.md does)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

# Heavy tier (issue 27 §5): this runs a benchmark script end to end, which checks the script,
# not the service (every code path it drives has its own tests); CI runs it in `make test-heavy`.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.heavy,
    # diffprivlib 0.6.6 passes L-BFGS-B options that recent SciPy deprecates
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


def test_the_quick_projection_calibration_writes_a_rule_and_an_evaluation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("diffprivlib", reason="the bench extra is not installed")
    from benchmarks import calibrate_projection as bench

    calibration, evaluation = tmp_path / "rule.json", tmp_path / "eval.json"
    args = ["--quick", "--calibration-json", str(calibration), "--json", str(evaluation)]
    assert bench.main(args) == 0
    data = json.loads(calibration.read_text())
    assert set(data["forms"]) == {
        f"{form} cutoff={cutoff:.3g} k_min={k_min}"
        for form in bench.FORMS
        for cutoff in bench.CUTOFFS
        for k_min in bench.K_MINS
    }
    chosen = data["chosen"]
    assert chosen["form"] in bench.FORMS
    assert chosen["k_min"] in bench.K_MINS
    for cell in data["cells"]:
        assert cell["k"][-1] == cell["d"]
        assert cell["gain"][-1] == 0.0
        assert all(math.isfinite(g) for g in cell["gain"])
    (row,) = json.loads(evaluation.read_text())["rows"]
    assert row["dataset"] == "breast_cancer"
    for mean, se in row["results"].values():
        assert math.isfinite(mean)
        assert se >= 0.0
    out = capsys.readouterr().out
    assert "| form | off when k ≥ | k_min |" in out
    assert "| data (n, d) | ε |" in out


def test_the_rule_is_a_clamped_public_function_of_n_d_and_epsilon() -> None:
    from benchmarks.calibrate_projection import rule_dimension

    rule = {"form": "linear", "c": 1 / 50, "k_min": 4}
    assert rule_dimension(400, 31, 0.1, rule) == 4  # ⌈40/50⌉ = 1, floored at k_min
    assert rule_dimension(400, 31, 1.0, rule) == 8
    assert rule_dimension(30_000, 106, 1.0, rule) is None  # 600 ≥ d: no projection
    half = {**rule, "cutoff": 0.5}
    assert rule_dimension(2_000, 40, 0.5, rule) == 20
    assert rule_dimension(2_000, 40, 0.5, half) is None  # 20 ≥ d/2
    assert rule_dimension(2_000, 41, 0.5, half) == 20
    with pytest.raises(ValueError):
        rule_dimension(400, 31, 0.0, rule)
