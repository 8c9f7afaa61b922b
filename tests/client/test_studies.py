"""Two sites learn together through the client and the command line: a study over Adult's
spec, a contributed model each, an average aggregation, dataset grants, a federated fit
charged to each dataset once, and the picture of the study's spend per member."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from privfit_client import Client
from privfit_client.cli import main

from tests.client.conftest import NO_WAIT, SPEC_PATH, MakeSite, small_csv
from tests.support.live_server import LiveServer

pytestmark = pytest.mark.slow


def test_study_average_federated_fit_and_spend_picture(
    server: LiveServer,
    make_site: MakeSite,
    adult_train_csv: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = make_site("Hospital A"), make_site("Hospital B")
    with (
        Client(server.base_url, a.key, retry=NO_WAIT) as pa,
        Client(server.base_url, b.key, retry=NO_WAIT) as pb,
    ):
        study = pa.create_study("consortium", [a.id, b.id], SPEC_PATH)
        assert {m.site_id for m in study.members} >= {a.id, b.id}
        datasets, models = [], []
        for n, (client, site) in enumerate(((pa, a), (pb, b))):
            dataset = client.upload(small_csv(adult_train_csv, 3000, skip=3000 * n), SPEC_PATH)
            job = client.fit(dataset.id, epsilon=0.5, regularization=1e-2).wait()
            assert job.model_id is not None
            monkeypatch.setenv("PRIVFIT_URL", server.base_url)
            monkeypatch.setenv("PRIVFIT_KEY", site.key)
            assert main(["contribute", study.id, "--model", job.model_id, "--json"]) == 0
            assert json.loads(capsys.readouterr().out)["kind"] == "model"
            grant = client.contribute(
                study.id, dataset_id=dataset.id, epsilon_cap=2.0, delta_cap=1e-6
            )
            assert grant.site_id == site.id
            datasets.append(dataset.id)
            models.append(job.model_id)
        assert [s.id for s in pb.studies()] == [study.id]

        monkeypatch.setenv("PRIVFIT_KEY", a.key)
        code = main(["aggregate", study.id, "--method", "average", "--wait", "--json"])
        aggregated = json.loads(capsys.readouterr().out)
        assert code == 0
        assert aggregated["status"] == "succeeded"
        averaged = pb.model(aggregated["model_id"])  # every member reads the result
        assert averaged.source == "aggregate"

        federated_args = ["federated-fit", study.id, "--protocol", "noisy_average"]
        federated_args += ["--epsilon", "1", "--regularization", "0.05", "--json"]
        assert main([*federated_args, "--dry-run"]) == 0
        quote = json.loads(capsys.readouterr().out)
        assert sorted(c["dataset_id"] for c in quote["costs"]) == sorted(datasets)
        assert main([*federated_args, "--wait"]) == 0
        assert json.loads(capsys.readouterr().out)["status"] == "succeeded"
        for client, dataset_id in zip((pa, pb), datasets, strict=True):
            charges = client.budget(dataset_id).charges
            assert sorted(c.epsilon for c in charges) == [0.5, 1.0]

        picture = tmp_path / "study.svg"
        code = main(["study", study.id, "--plot", str(picture), "--json"])
        shown = json.loads(capsys.readouterr().out)
    assert code == 0
    spent = {c["site_id"]: c["epsilon_spent"] for c in shown["contributions"] if c["dataset_id"]}
    assert spent == {a.id: 1.0, b.id: 1.0}
    text = picture.read_text()
    assert "<svg" in text
    assert "Study consortium: privacy spend per member" in text
    assert "ε granted" in text
    assert "ε spent" in text
    assert "(coordinator)" in text
    assert text.count("1 model(s)") == 2
    studies_code = main(["studies", "--json"])
    assert studies_code == 0
    assert [s["id"] for s in json.loads(capsys.readouterr().out)] == [study.id]
