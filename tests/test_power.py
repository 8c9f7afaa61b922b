"""The default test tier catches a sampler drawing half the noise (issue 27 §5).

``tests/support/half_noise.py`` makes every lattice sampler draw half its noise (σ/2, 2β);
the noise-law tests of the default tier (``make test``, not ``heavy``) must then fail. Each
compares the released or enclosed noise with its hand-derived law (Kolmogorov–Smirnov at
p < 10⁻⁴ or tighter); at half the noise their p-values are below 10⁻⁵⁰.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Default-tier tests that pin the lattice samplers to their laws.
LAW_TESTS = (
    "tests/unit/dp/test_certified.py::test_release_noise_is_the_hand_derived_law",
    "tests/unit/dp/test_enclosure.py::test_enclosure_laws_are_the_hand_derived_ones",
    "tests/unit/dp/test_distribution.py::test_output_perturbation_noise_norm_is_gamma",
)


@pytest.mark.heavy
@pytest.mark.slow
def test_the_default_tier_catches_half_the_noise() -> None:
    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rf"]
        return subprocess.run(
            [*command, "-m", "not heavy", *extra, *LAW_TESTS],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            env=os.environ.copy(),
        )

    honest = run()
    assert honest.returncode == 0, honest.stdout[-3000:]
    mutant = run("-p", "tests.support.half_noise")
    assert mutant.returncode == 1, mutant.stdout[-3000:]
    for test in LAW_TESTS:
        assert f"FAILED {test}" in mutant.stdout, mutant.stdout[-3000:]
