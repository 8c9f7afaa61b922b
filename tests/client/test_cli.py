"""``privfit-client`` against a real server: login, upload, fit with --wait, jobs, models,
predict a CSV to a CSV, export, budget with its picture, and the documented exit codes."""

from __future__ import annotations

import csv
import io
import json
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from privfit_client import PREDICT_BATCH
from privfit_client.cli import main

from tests.client.conftest import SPEC_PATH, SiteAccount, read_rows, small_csv
from tests.support.live_server import LiveServer

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private config directory, and no credentials in the environment."""
    home = tmp_path / "config-home"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.delenv("PRIVFIT_URL", raising=False)
    monkeypatch.delenv("PRIVFIT_KEY", raising=False)
    return home


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the command line in this process: (exit code, stdout, stderr)."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def write_predict_input(source: Path, target: Path, rows: int) -> None:
    """``rows`` complete rows of ``source`` without the label column."""
    with source.open(newline="") as inp, target.open("w", newline="") as outp:
        reader = csv.DictReader(inp)
        fields = [f for f in reader.fieldnames or [] if f != "income"]
        writer = csv.DictWriter(outp, fieldnames=fields)
        writer.writeheader()
        written = 0
        for row in reader:
            if all(row.values()) and written < rows:
                writer.writerow({f: row[f] for f in fields})
                written += 1
    assert written == rows


def test_walkthrough(
    capsys: pytest.CaptureFixture[str],
    server: LiveServer,
    site: SiteAccount,
    adult_train_csv: Path,
    adult_test_csv: Path,
    tmp_path: Path,
    config_home: Path,
) -> None:
    code, _, err = run(capsys, "models")
    assert code == 2
    assert "login" in err

    login = run_json(capsys, "login", "--url", server.base_url, "--key", site.key)
    assert login["site"]["id"] == site.id
    config = Path(login["config"])
    assert config.is_relative_to(config_home)
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text())["key"] == site.key

    dataset = run_json(capsys, "upload", str(adult_train_csv), "--spec", str(SPEC_PATH))
    assert dataset["n_rows"] > 30_000
    assert [d["id"] for d in run_json(capsys, "datasets")] == [dataset["id"]]

    quote = run_json(capsys, "fit", dataset["id"], "--epsilon", "1", "--dry-run")
    assert quote["cost"]["epsilon"] == 1.0
    job = run_json(
        capsys, "fit", dataset["id"], "--mechanism", "objective_perturbation", "--epsilon", "1",
        "--wait",
    )  # fmt: skip
    assert job["status"] == "succeeded"
    model_id = job["model_id"]
    assert run_json(capsys, "job", job["id"], "--wait")["model_id"] == model_id
    assert [j["id"] for j in run_json(capsys, "jobs")] == [job["id"]]
    assert [m["id"] for m in run_json(capsys, "models")] == [model_id]
    code, out, _ = run(capsys, "model", model_id)
    assert code == 0
    assert model_id in out

    # Human output too: the progress bar goes to stderr, the outcome to stdout.
    code, out, err = run(capsys, "fit", dataset["id"], "--epsilon", "0.5", "--wait")
    assert code == 0
    assert "succeeded" in out
    assert "100%" in err  # the progress bar, on stderr

    budget = run_json(capsys, "budget", dataset["id"])
    assert budget["epsilon_spent"] == 1.5
    assert len(budget["charges"]) == 2

    rows_in, rows_out = tmp_path / "in.csv", tmp_path / "out.csv"
    write_predict_input(adult_test_csv, rows_in, PREDICT_BATCH + 234)
    summary = run_json(capsys, "predict", model_id, str(rows_in), str(rows_out))
    assert summary["rows"] == PREDICT_BATCH + 234
    with rows_out.open(newline="") as handle:
        scored = list(csv.DictReader(handle))
    assert len(scored) == PREDICT_BATCH + 234
    assert {"age", "positive", "score", "probability"} <= set(scored[0])
    assert all((float(r["score"]) > 0) == (r["positive"] == "True") for r in scored)
    assert sum(r["positive"] == "True" for r in scored) == summary["positive"]

    exported = tmp_path / "model.json"
    run_json(capsys, "export", model_id, "--format", "json", "-o", str(exported))
    document = json.loads(exported.read_text())
    assert document["model_id"] == model_id
    assert document["privacy"]["epsilon"] == 1.0
    for standard in ("skops", "onnx"):
        saved = tmp_path / f"model.{standard}"
        run_json(capsys, "export", model_id, "--format", standard, "-o", str(saved))
        assert saved.stat().st_size > 1000
    assert zipfile.is_zipfile(tmp_path / "model.skops")  # skops archives are zip files

    png, svg = tmp_path / "budget.png", tmp_path / "budget.svg"
    code, out, _ = run(capsys, "budget", dataset["id"], "--plot", str(png))
    assert code == 0
    assert "remaining" in out
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    run_json(capsys, "budget", dataset["id"], "--plot", str(svg))
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml")
    assert "<svg" in text
    assert f"Privacy budget of dataset {dataset['id']}" in text
    total = json.loads(SPEC_PATH.read_text())["budget"]["epsilon"]
    assert f"ε remaining: {total - 1.5:g} of {total:g}" in text
    assert "ε per job" in text

    # Exit codes scripts can branch on.
    assert run(capsys, "fit", dataset["id"], "--epsilon", "100")[0] == 4
    assert run(capsys, "model", "no-such-model")[0] == 3
    assert run(capsys, "fit", dataset["id"], "--mechanism", "nope", "--epsilon", "1")[0] == 7
    assert run(capsys, "--key", "pf_wrong_key_0123456789abcdefgh", "models")[0] == 6
    assert run(capsys, "fit")[0] == 2
    assert run(capsys, "contribute", "some-study")[0] == 2  # neither --model nor --dataset
    assert run(capsys, "cancel", job["id"])[0] == 7  # it has ended: 409
    code, _, err = run(capsys, "predict", model_id, str(adult_test_csv), str(rows_out))
    assert code == 7  # some rows of the raw test split miss a value
    assert "row" in err


def test_entry_point_reads_the_environment_and_exits_with_the_code(
    server: LiveServer, site: SiteAccount, adult_train_csv: Path, tmp_path: Path
) -> None:
    data = tmp_path / "small.csv"
    data.write_bytes(small_csv(adult_train_csv, 300))
    env = {"PRIVFIT_URL": server.base_url, "PRIVFIT_KEY": site.key, "PATH": "/usr/bin:/bin"}
    script = Path(sys.executable).parent / "privfit-client"

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(script), *args], env=env, capture_output=True, text=True, timeout=120
        )

    uploaded = call("upload", str(data), "--spec", str(SPEC_PATH), "--json")
    assert uploaded.returncode == 0, uploaded.stderr
    dataset_id = json.loads(uploaded.stdout)["id"]
    failed = call("budget", "no-such-dataset")
    assert failed.returncode == 3
    assert "not found" in failed.stderr.lower()
    assert call("budget", dataset_id, "--json").returncode == 0


@pytest.mark.filterwarnings("ignore::getpass.GetPassWarning")  # no terminal to hide the key on
def test_login_prompts_for_the_key_and_keeps_it_private(
    capsys: pytest.CaptureFixture[str],
    server: LiveServer,
    site: SiteAccount,
    config_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    adult_train_csv: Path,
    tmp_path: Path,
) -> None:
    stale = config_home / "privfit-client" / "config.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    stale.chmod(0o644)
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{site.key}\n"))
    code, out, _ = run(capsys, "login", "--url", server.base_url)
    assert code == 0
    assert site.key not in out
    assert stat.S_IMODE(stale.stat().st_mode) == 0o600
    assert stat.S_IMODE(stale.parent.stat().st_mode) & 0o077 == 0

    # A Parquet file is sent as it is; the server recognises it by its content.
    parquet = tmp_path / "adult.parquet"
    pd.read_csv(io.BytesIO(small_csv(adult_train_csv, 800))).dropna().to_parquet(parquet)
    dataset = run_json(capsys, "upload", str(parquet), "--spec", str(SPEC_PATH))
    assert dataset["ingest"]["format"] == "parquet"


RELATIONSHIPS = ["Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"]


def _task_dataset(
    capsys: pytest.CaptureFixture[str],
    server: LiveServer,
    site: SiteAccount,
    adult_train_csv: Path,
    tmp_path: Path,
    label: dict[str, Any],
) -> tuple[dict[str, Any], Path]:
    """Adult's first 400 rows uploaded with ``label`` (its column no longer a feature)."""
    spec = json.loads(SPEC_PATH.read_text())
    spec["label"] = label
    spec["features"] = [f for f in spec["features"] if f["column"] != label["column"]]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    data = tmp_path / "small.csv"
    data.write_bytes(small_csv(adult_train_csv, 400))
    run_json(capsys, "login", "--url", server.base_url, "--key", site.key)
    dataset = run_json(capsys, "upload", str(data), "--spec", str(tmp_path / "spec.json"))
    return dataset, data


def _api_predictions(server: LiveServer, site: SiteAccount, model_id: str, rows: Any) -> Any:
    from privfit_client import Client

    with Client(server.base_url, site.key) as client:
        return client.predict(model_id, rows)


def test_predict_writes_the_class_and_its_probabilities_for_a_multiclass_model(
    capsys: pytest.CaptureFixture[str],
    server: LiveServer,
    site: SiteAccount,
    adult_train_csv: Path,
    tmp_path: Path,
) -> None:
    label = {"column": "relationship", "classes": RELATIONSHIPS}
    dataset, data = _task_dataset(capsys, server, site, adult_train_csv, tmp_path, label)
    assert dataset["task"] == "multiclass"
    job = run_json(
        capsys, "fit", dataset["id"], "--mechanism", "objective_perturbation", "--epsilon", "1",
        "--regularization", "0.01", "--wait",
    )  # fmt: skip
    assert job["status"] == "succeeded", job
    rows_in, rows_out = tmp_path / "in.csv", tmp_path / "out.csv"
    write_predict_input(data, rows_in, 25)
    summary = run_json(capsys, "predict", job["model_id"], str(rows_in), str(rows_out))
    assert summary["rows"] == 25
    assert "positive" not in summary
    written = pd.read_csv(rows_out)
    probability_columns = [f"probability[{c}]" for c in RELATIONSHIPS]
    inputs = pd.read_csv(rows_in)
    assert list(written.columns) == [*inputs.columns, "predicted_class", *probability_columns]
    # the same as the API (and the client's DataFrame) answers for these rows
    expected = _api_predictions(server, site, job["model_id"], read_rows(rows_in))
    assert list(written["predicted_class"]) == [p.predicted_class for p in expected]
    np.testing.assert_allclose(
        written[probability_columns].to_numpy(), [p.probabilities for p in expected], rtol=1e-12
    )
    assert sum(summary["predicted_classes"].values()) == 25
    assert set(summary["predicted_classes"]) <= set(RELATIONSHIPS)
    frame = _api_predictions(server, site, job["model_id"], inputs)
    assert list(frame.columns) == ["predicted_class", *probability_columns]
    assert list(frame["predicted_class"]) == list(written["predicted_class"])
    np.testing.assert_allclose(frame[probability_columns].sum(axis=1), 1.0, rtol=1e-12)
    code, out, _ = run(capsys, "predict", job["model_id"], str(rows_in), str(rows_out))
    assert code == 0
    assert "25 rows scored" in out


def test_predict_writes_the_value_of_a_regression_model(
    capsys: pytest.CaptureFixture[str],
    server: LiveServer,
    site: SiteAccount,
    adult_train_csv: Path,
    tmp_path: Path,
) -> None:
    label = {"column": "hours-per-week", "lower": 1, "upper": 99}
    dataset, data = _task_dataset(capsys, server, site, adult_train_csv, tmp_path, label)
    assert dataset["task"] == "regression"
    # no --loss: the task's own (squared), which AdaSSP fits
    job = run_json(
        capsys, "fit", dataset["id"], "--mechanism", "adassp", "--epsilon", "1", "--delta",
        "1e-6", "--regularization", "0.01", "--wait",
    )  # fmt: skip
    assert job["status"] == "succeeded", job
    rows_in, rows_out = tmp_path / "in.csv", tmp_path / "out.csv"
    write_predict_input(data, rows_in, 25)
    summary = run_json(capsys, "predict", job["model_id"], str(rows_in), str(rows_out))
    assert summary == {"rows": 25, "output": str(rows_out)}
    written = pd.read_csv(rows_out)
    assert list(written.columns)[-2:] == ["value", "score"]
    assert written["value"].between(1, 99).all()
    expected = _api_predictions(server, site, job["model_id"], read_rows(rows_in))
    np.testing.assert_allclose(written["value"], [p.value for p in expected], rtol=1e-12)
    np.testing.assert_allclose(written["score"], [p.score for p in expected], rtol=1e-12)
    frame = _api_predictions(server, site, job["model_id"], pd.read_csv(rows_in))
    assert list(frame.columns) == ["value", "score"]
    np.testing.assert_allclose(frame["value"], written["value"], rtol=1e-12)
    # the standard exports of the model are there too
    exported = run_json(
        capsys, "export", job["model_id"], "--format", "onnx", "-o", str(tmp_path / "m.onnx")
    )
    assert exported["bytes"] > 0
    document = run_json(capsys, "export", job["model_id"], "-o", str(tmp_path / "m.json"))
    assert json.loads(Path(document["output"]).read_text())["task"] == "regression"
