"""The client's ``mechanism="auto"`` and warnings against a real server (issue 28)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from privfit_client import Client

from tests.client.conftest import SPEC_PATH, small_csv

pytestmark = pytest.mark.slow


def test_auto_quote_fit_and_the_warning(site_client: Client, adult_train_csv: Path) -> None:
    pf = site_client
    spec = json.loads(SPEC_PATH.read_text())
    train = pf.upload(small_csv(adult_train_csv, 2000), spec)
    pf.upload(small_csv(adult_train_csv, 1000, skip=2000), {**spec, "allow_non_private": True})

    quote = pf.quote_fit(train.id, "auto", epsilon=1.0)
    assert quote.auto is not None
    assert quote.mechanism == quote.auto["chosen"]["mechanism"]
    assert quote.expected_accuracy is not None
    assert quote.expected_accuracy["baseline_source"] == "public_reference_dataset"
    job = pf.fit(train.id, "auto", epsilon=1.0, wait=30)
    job.wait()
    assert job.status == "succeeded"
    assert job.state.params["auto"] == quote.auto
    assert pf.budget(train.id).epsilon_spent == 1.0

    # E‖b‖ = 2d/(nλε) ≈ 2·106/(2000·1e-4·0.01) ≈ 1e5: a random direction, below the majority
    noisy = pf.fit(train.id, "output_perturbation", epsilon=0.01, regularization=1e-4)
    assert [w["code"] for w in noisy.warnings] == ["below_majority_baseline"]
