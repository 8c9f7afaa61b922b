"""The client's private evaluation, private tuning and planner against a real server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from privfit_client import Client
from privfit_client.models import PlanRead

from tests.client.conftest import SPEC_PATH, small_csv

pytestmark = pytest.mark.slow


def test_tune_evaluate_and_plan(site_client: Client, adult_train_csv: Path) -> None:
    pf = site_client
    spec = json.loads(SPEC_PATH.read_text())
    train = pf.upload(small_csv(adult_train_csv, 3000), spec)
    held_out = pf.upload(small_csv(adult_train_csv, 2000, skip=3000), spec)
    public = pf.upload(
        small_csv(adult_train_csv, 2000, skip=5000), {**spec, "allow_non_private": True}
    )

    job = pf.fit(train.id, "output_perturbation", epsilon=1.0, regularization=[1e-2, 1e-1], wait=30)
    job.wait()
    assert job.status == "succeeded"
    model = job.model()
    assert pf.budget(train.id).epsilon_spent == 1.0

    quote = pf.quote_evaluation(model.id, held_out.id, epsilon=0.5)
    assert quote.cost.epsilon == 0.5
    assert quote.warnings == []
    evaluation_job = pf.evaluate(model.id, held_out.id, epsilon=0.5, wait=30)
    evaluation_job.wait()
    assert evaluation_job.status == "succeeded"
    evaluation = pf.evaluation(evaluation_job.id)
    assert evaluation.model_id == model.id
    accuracy = evaluation.result["metrics"]["accuracy"]
    assert 0.5 < accuracy["estimate"] < 1.0
    assert [e.id for e in pf.evaluations(model.id)] == [evaluation_job.id]
    assert pf.budget(held_out.id).epsilon_spent == 0.5

    plan = pf.plan(
        train.id,
        "output_perturbation",
        epsilons=[0.1, 1.0],
        regularizations=[1e-2],
        reference_dataset_id=public.id,
        repeats=3,
        seed=0,
    )
    assert isinstance(plan, PlanRead)
    assert len(plan.points) == 2
    assert plan.points[1]["simulated_accuracy"]["mean"] > 0.6
    picture = pf.plan(train.id, "output_perturbation", epsilons=[0.1, 1.0], svg=True)
    assert isinstance(picture, str)
    assert picture.startswith("<svg")
    assert pf.budget(public.id).epsilon_spent == 0.0
