"""The README's walkthrough through the Python client, against a real server (SQLite and
PostgreSQL): a site is created, uploads Adult, quotes and fits under its budget, waits with
the long poll, reads its budget, predicts more rows than one request takes, and exports."""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx
import pandas as pd
import pytest
from privfit_client import PREDICT_BATCH, Client
from privfit_client.errors import Unauthenticated

from tests.client.conftest import NO_WAIT, SPEC_PATH, make_site_on, read_rows, small_csv
from tests.conftest import ADMIN_KEY
from tests.support.live_server import LiveServer

pytestmark = pytest.mark.slow


class CountingTransport(httpx.HTTPTransport):
    """httpx's transport, counting requests by method and path."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.calls.append((request.method, request.url.path))
        return super().handle_request(request)


def complete_rows(path: Path, count: int) -> list[dict[str, str]]:
    """The first ``count`` rows of a CSV file without an empty cell, label dropped."""
    rows = [r for r in read_rows(path) if all(v != "" for v in r.values())][:count]
    assert len(rows) == count
    for row in rows:
        del row["income"]
    return rows


def run_walkthrough(server: LiveServer, train_csv: Path, test_csv: Path) -> None:
    site = make_site_on(server, "St. Mary's Hospital")
    counting = CountingTransport()
    with Client(server.base_url, site.key, retry=NO_WAIT, transport=counting) as pf:
        assert pf.me().id == site.id

        dataset = pf.upload(train_csv, SPEC_PATH)
        spec = json.loads(SPEC_PATH.read_text())
        assert dataset.n_rows > 30_000
        assert dataset.budget.epsilon == spec["budget"]["epsilon"]
        assert dataset.ingest is not None
        assert dataset.ingest.format == "csv"

        quote = pf.quote_fit(dataset.id, epsilon=1.0, regularization=1e-3)
        assert (quote.cost.epsilon, quote.cost.delta) == (1.0, 0.0)
        assert pf.budget(dataset.id).epsilon_spent == 0.0  # a dry run spends nothing

        job = pf.fit(dataset.id, "objective_perturbation", epsilon=1.0, regularization=1e-3)
        seen: list[str] = []
        job.wait(progress=lambda state: seen.append(state.status))
        assert job.status == "succeeded"
        assert job.model_id is not None
        assert seen[-1] == "succeeded"
        model = job.model()
        assert model.privacy.epsilon == 1.0
        assert model.coefficients is not None
        assert len(model.coefficients) == dataset.n_features

        budget = pf.budget(dataset.id)
        assert (budget.epsilon_spent, budget.epsilon_remaining) == (
            1.0,
            spec["budget"]["epsilon"] - 1.0,
        )
        assert [c.job_id for c in budget.charges] == [job.id]

        rows = complete_rows(test_csv, PREDICT_BATCH + 500)
        counting.calls.clear()
        predictions = pf.predict(model.id, rows)
        posts = [c for c in counting.calls if c == ("POST", f"/v1/models/{model.id}/predict")]
        assert len(posts) == 2
        assert len(predictions) == len(rows)
        # Batching keeps the order: the last row alone gives the last prediction.
        alone = pf.predict(model.id, rows[-1:])[0]
        assert alone.score == pytest.approx(predictions[-1].score, rel=1e-9)
        assert all(p.score is not None and (p.score > 0) == p.positive for p in predictions)

        frame = pd.DataFrame(rows[:10]).astype({"age": "int64", "hours-per-week": "float64"})
        scored = pf.predict(model.id, frame)
        assert list(scored.columns) == ["positive", "score", "probability"]
        assert scored["score"].tolist() == pytest.approx([p.score for p in predictions[:10]])

        export = pf.export(model.id)
        assert export.model_id == model.id
        assert export.weights is not None
        assert export.privacy["epsilon"] == 1.0
        assert pf.export(model.id, "onnx")[:2] != b"PK"  # ONNX protobuf, not a zip
        assert pf.export(model.id, "skops")[:2] == b"PK"

        assert [m.id for m in pf.models()] == [model.id]
        assert [d.id for d in pf.datasets()] == [dataset.id]
        assert [j.id for j in pf.jobs()] == [job.id]

        # A DataFrame is uploaded as Parquet; Prefer: wait answers with the finished job.
        frame = pd.read_csv(io.BytesIO(small_csv(train_csv, 2000)))
        parquet = pf.upload(frame.dropna(), SPEC_PATH)
        assert parquet.ingest is not None
        assert parquet.ingest.format == "parquet"
        finished = pf.fit(parquet.id, epsilon=0.5, regularization=1e-2, wait=30)
        assert finished.wait().status == "succeeded"


def test_walkthrough_on_sqlite(
    server: LiveServer, adult_train_csv: Path, adult_test_csv: Path
) -> None:
    run_walkthrough(server, adult_train_csv, adult_test_csv)


@pytest.mark.postgres
def test_walkthrough_on_postgres(
    pg_server: LiveServer, adult_train_csv: Path, adult_test_csv: Path
) -> None:
    run_walkthrough(pg_server, adult_train_csv, adult_test_csv)


def test_admin_lists_sites_and_the_environment_configures_the_client(
    jobless_live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a server of its own: the admin lists every site on it; no job runs, so no process
    # pool's warm worker (an interpreter importing the service) is started for it
    server = jobless_live_server
    monkeypatch.setenv("PRIVFIT_URL", server.base_url + "/v1/")
    monkeypatch.setenv("PRIVFIT_KEY", ADMIN_KEY)
    with Client() as admin:
        created = admin.create_site("Bank A")
        assert [s.id for s in admin.sites()] == [created.site.id]
        assert admin.site(created.site.id).name == "Bank A"
        deactivated = admin.deactivate_site(created.site.id)
        assert deactivated.deactivated_at is not None
        assert admin.site(created.site.id).deactivated_at == deactivated.deactivated_at
    with Client(server.base_url, created.key.api_key) as revoked, pytest.raises(Unauthenticated):
        revoked.me()
