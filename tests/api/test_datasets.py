"""Dataset upload, listing, reading and deletion through HTTP (issue 4 item 1,
docs/design.md §2, §5).

Runs on SQLite and PostgreSQL. What is checked:

* a CSV and a Parquet upload give 201 with the public metadata, and the stored content, read
  back with :func:`service.domain.datasets.catalog.load_design`, equals a hand-computed encoding
  (clamping to the declared bounds, an all-zero block for an undeclared category, the
  intercept, rows clipped to norm ≤ 1, labels of the two declared classes);
* every bad upload is a precise 4xx ``application/problem+json`` with a stable ``type``, stores
  nothing (no dataset row, no content chunk) and quotes no private cell value;
* deleting a dataset removes its content and keeps its ledger; fits on it are then a 409.
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

import httpx2 as httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from numpy.typing import NDArray
from sqlalchemy import Engine, text

from service.api.schemas.problem import PROBLEM_MEDIA_TYPE, PROBLEM_TYPE_BASE
from service.db.session import make_engine
from service.db.uow import UnitOfWorkFactory
from service.domain.datasets.catalog import load_design
from service.domain.datasets.codec import EncodedChunk
from service.domain.datasets.ingest import ingest
from service.domain.datasets.readers import IngestReport
from service.domain.ledger.budgets import DatasetDeletedError
from tests.conftest import MakeSite, SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: Distinctive private cell values: none may ever appear in an error body.
SECRETS = ("SECRET-7731", "SECRET-4242", "SECRET-0099", "31337.5")

HEADER = "patient,age,color,income,outcome"
#: Five rows: clamping (age 10 and 95, income 1500), an undeclared category ("purple"),
#: labels of the declared classes ("yes", "no"), a private value in a column that is never
#: read (patient), and an
#: extra column (patient) that is never read.
ROWS = (
    "SECRET-0099,30,red,200,yes",
    "p2,10,purple,500,no",
    "p3,95,blue,1500,no",
    "p4,54,green,0,yes",
    "p5,18,red,1000,no",
)
FEATURE_NAMES = ["age", "color=red", "color=green", "color=blue", "income", "intercept"]
#: The hand-computed encoding of ROWS before the row clip: age ↦ (clamp(age, 18, 90) − 18)/72,
#: color one-hot over (red, green, blue), income ↦ clamp(income, 0, 1000)/1000, intercept 1.
RAW_X = np.array(
    [
        [12 / 72, 1, 0, 0, 0.2, 1],
        [0.0, 0, 0, 0, 0.5, 1],
        [1.0, 0, 0, 1, 1.0, 1],
        [36 / 72, 0, 1, 0, 0.0, 1],
        [0.0, 1, 0, 0, 1.0, 1],
    ]
)
EXPECTED_Y = np.array([1.0, -1.0, -1.0, 1.0, -1.0])


def base_spec(**overrides: Any) -> dict[str, Any]:
    """The upload spec of ROWS, with top-level keys replaced by ``overrides``."""
    spec: dict[str, Any] = {
        "name": "toy",
        "label": {"column": "outcome", "positive": "yes", "negative": "no"},
        "features": [
            {"column": "age", "type": "numeric", "lower": 18, "upper": 90},
            {"column": "color", "type": "categorical", "categories": ["red", "green", "blue"]},
            {"column": "income", "type": "numeric", "lower": 0, "upper": 1000},
        ],
        "budget": {"epsilon": 1.0, "delta": 1e-6},
        "missing": "error",
        "allow_non_private": False,
    }
    spec.update(overrides)
    return spec


def csv_bytes(rows: tuple[str, ...] | list[str] = ROWS, header: str = HEADER) -> bytes:
    return ("\n".join([header, *rows]) + "\n").encode()


def parquet_bytes() -> bytes:
    cells = [r.split(",") for r in ROWS]
    table = pa.table(
        {
            "patient": pa.array([c[0] for c in cells]),
            "age": pa.array([int(c[1]) for c in cells], pa.int64()),
            "color": pa.array([c[2] for c in cells]).dictionary_encode(),
            "income": pa.array([float(c[3]) for c in cells], pa.float64()),
            "outcome": pa.array([c[4] for c in cells]),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def upload(
    client: TestClient,
    site: SiteHandle,
    data: bytes,
    spec: Mapping[str, Any] | str | None = None,
    *,
    filename: str = "toy.csv",
    media_type: str = "text/csv",
) -> httpx.Response:
    """``POST /v1/datasets`` with a ``file`` and a ``spec`` part."""
    spec_text = spec if isinstance(spec, str) else json.dumps(spec or base_spec())
    return client.post(
        "/v1/datasets",
        files={"file": (filename, data, media_type), "spec": (None, spec_text)},
        headers=site.headers,
    )


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    """The response is a problem+json of ``status`` whose ``type`` ends in ``slug``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_MEDIA_TYPE)
    body: dict[str, Any] = response.json()
    assert body["type"] == PROBLEM_TYPE_BASE + slug, body
    assert body["status"] == status
    assert body["title"]
    assert isinstance(body["detail"], str)
    assert body["detail"]
    for secret in SECRETS:
        assert secret not in response.text, f"private value {secret!r} leaked: {response.text}"
    return body


def stored_rows(engine: Engine) -> tuple[int, int]:
    """(dataset rows, dataset_chunk rows) in the database."""
    with engine.connect() as connection:
        datasets = connection.execute(text("SELECT COUNT(*) FROM dataset")).scalar_one()
        chunks = connection.execute(text("SELECT COUNT(*) FROM dataset_chunk")).scalar_one()
    return int(datasets), int(chunks)


def assert_nothing_stored(client: TestClient, site: SiteHandle, engine: Engine) -> None:
    listed = client.get("/v1/datasets?include_deleted=true", headers=site.headers)
    assert listed.status_code == 200
    assert listed.json()["items"] == []
    assert listed.json()["total"] == 0
    assert stored_rows(engine) == (0, 0)


def expected_design() -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    norms = np.linalg.norm(RAW_X, axis=1, keepdims=True)
    return RAW_X / np.maximum(1.0, norms), EXPECTED_Y


def wait_for_job(
    client: TestClient, site: SiteHandle, job_id: str, timeout: float = 30.0
) -> dict[str, Any]:
    """The job once it has finished: long polls (``?wait=``, at most 30 s each), failing
    after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        wait = min(30.0, max(deadline - time.monotonic(), 0.0))
        response = client.get(f"/v1/jobs/{job_id}", params={"wait": wait}, headers=site.headers)
        assert response.status_code == 200, response.text
        job: dict[str, Any] = response.json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        assert time.monotonic() < deadline, f"job {job_id} still {job['status']}"


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


# ---- uploads that succeed -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_upload_stores_the_hand_computed_encoding(
    kind: str, client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory
) -> None:
    data = csv_bytes() if kind == "csv" else parquet_bytes()
    filename, media = ("toy.csv", "text/csv") if kind == "csv" else ("toy.parquet", "x/y")
    response = upload(client, site, data, filename=filename, media_type=media)

    assert response.status_code == 201, response.text
    body = response.json()
    assert len(body["id"]) == 32
    assert body["name"] == "toy"
    assert body["owner"] == site.id
    assert body["n_rows"] == 5
    assert body["n_features"] == 6  # age, 3 colors, income, intercept
    assert body["feature_names"] == FEATURE_NAMES
    assert body["budget"] == {"epsilon": 1.0, "delta": 1e-6}
    assert body["spec"]["label"] == {"column": "outcome", "positive": "yes", "negative": "no"}
    assert body["spec"]["features"][0] == {
        "type": "numeric",
        "column": "age",
        "lower": 18.0,
        "upper": 90.0,
    }
    assert body["spec"]["budget"] == {"epsilon": 1.0, "delta": 1e-6}
    assert body["spec"]["missing"] == "error"
    assert body["allow_non_private"] is False
    assert body["deleted_at"] is None
    assert body["ingest"] == {
        "format": kind,
        "rows_read": 5,
        "rows_dropped": 0,
        "unknown_category_rows": {"color": 1},
    }

    X, y = load_design(uow_factory, body["id"])
    X_expected, y_expected = expected_design()
    assert X.shape == (5, 6)
    np.testing.assert_allclose(X, X_expected, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(y, y_expected)
    assert np.all(np.linalg.norm(X, axis=1) <= 1.0 + 1e-12)
    # Row 2 (age 10, "purple"): age clamped to the lower bound, all-zero color block.
    assert X[1, 0] == 0.0
    assert list(X[1, 1:4]) == [0.0, 0.0, 0.0]
    # Row 3 (age 95, income 1500): both clamped to their upper bound (then the row clip).
    assert X[2, 0] == X[2, 4] == X[2, 3] == X[2, 5]
    # Every row ends with the intercept's column, the largest coordinate of a clipped row.
    assert np.all(X[:, 5] > 0)

    got = client.get(f"/v1/datasets/{body['id']}", headers=site.headers)
    assert got.status_code == 200
    assert got.json() == body


def test_label_classes_are_compared_as_text(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory
) -> None:
    rows = ["1,20,red,1,1", "2,20,red,1,0", "3,20,red,1,0", "4,20,red,1,1"]
    spec = base_spec(label={"column": "outcome", "positive": 1, "negative": 0})
    response = upload(client, site, csv_bytes(rows), spec)
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["label"] == {
        "column": "outcome",
        "positive": "1",
        "negative": "0",
    }
    _, y = load_design(uow_factory, response.json()["id"])
    np.testing.assert_array_equal(y, [1, -1, -1, 1])


def test_label_values_of_neither_class_are_refused_with_counts(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    rows = [*ROWS, "p6,20,red,1,YES", "p7,20,red,1,maybe", "p8,20,red,1,SECRET-4242"]
    body = assert_problem(upload(client, site, csv_bytes(rows)), 422, "invalid-label-values")
    assert body["detail"].startswith("3 rows of 8 have a value in the label column 'outcome'")
    assert body["label_column"] == "outcome"
    assert body["label_rows"] == 3
    assert body["errors"] == [
        {"loc": ["file", "outcome"], "msg": "3 row(s) hold a label value of neither declared class"}
    ]
    for value in ("YES", "maybe"):
        assert value not in json.dumps(body)
    assert_nothing_stored(client, site, engine)


def test_the_earlier_label_form_is_read_when_the_label_has_two_values(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory
) -> None:
    """A spec naming only the positive class (the form stored specs and older clients use)
    still uploads a file whose label column holds exactly one other value."""
    spec = base_spec(label={"column": "outcome", "positive": "yes"})
    response = upload(client, site, csv_bytes(), spec)
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["label"] == {"column": "outcome", "positive": "yes"}
    _, y = load_design(uow_factory, response.json()["id"])
    np.testing.assert_array_equal(y, EXPECTED_Y)


def test_the_earlier_label_form_with_an_ambiguous_label_explains_the_new_field(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    rows = [*ROWS, "p6,20,red,1,maybe", "p7,20,red,1,SECRET-4242"]
    spec = base_spec(label={"column": "outcome", "positive": "yes"})
    body = assert_problem(upload(client, site, csv_bytes(rows), spec), 422, "invalid-label-values")
    assert "names only the positive class 'yes'" in body["detail"]
    assert "more than one value" in body["detail"]
    assert '"negative": "..."' in body["detail"]
    assert body["label_rows"] == 5
    assert "maybe" not in json.dumps(body)
    assert_nothing_stored(client, site, engine)


def test_missing_values_can_be_dropped(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory
) -> None:
    rows = [*ROWS, "p6,,red,3,yes", "p7,40,?,3,no", "p8,40,red,NA,yes"]
    response = upload(client, site, csv_bytes(rows), base_spec(missing="drop"))
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["n_rows"] == 5
    assert body["ingest"]["rows_read"] == 8
    assert body["ingest"]["rows_dropped"] == 3
    X, y = load_design(uow_factory, body["id"])
    X_expected, y_expected = expected_design()
    np.testing.assert_allclose(X, X_expected, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(y, y_expected)


def test_scale_row_norm_divides_by_the_public_constant(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory
) -> None:
    response = upload(client, site, csv_bytes(), base_spec(row_norm="scale"))
    assert response.status_code == 201, response.text
    X, _ = load_design(uow_factory, response.json()["id"])
    # M = √(3 features + intercept) = 2, from the spec alone.
    # Rows that land on the unit sphere are scaled by 1 − (a few ulps) so that ‖x‖ ≤ 1 holds
    # in exact arithmetic (service.dp.core.validation): within 1e-14 of the exact division.
    np.testing.assert_allclose(X, RAW_X / 2.0, rtol=0, atol=1e-14)


def test_reading_the_file_holds_no_database_lock(
    client: TestClient,
    site: SiteHandle,
    db_url: str,
    uow_factory: UnitOfWorkFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the file is parsed and encoded, other requests can write at once: a big upload
    must not hold SQLite's single write lock (or a PostgreSQL transaction) for its duration.
    Checked with a writer that gives up immediately instead of waiting for the lock."""
    impatient = make_engine(db_url, busy_timeout_ms=0)
    writes: list[str] = []

    def ingest_and_write_meanwhile(
        source: IO[bytes], spec: Any, *, on_chunk: Callable[[EncodedChunk], None]
    ) -> IngestReport:
        def chunk_then_write(chunk: EncodedChunk) -> None:
            on_chunk(chunk)
            with impatient.begin() as connection:
                connection.execute(text("UPDATE site SET name = name"))
            writes.append("written")

        return ingest(source, spec, on_chunk=chunk_then_write)

    monkeypatch.setattr("service.domain.datasets.catalog.ingest", ingest_and_write_meanwhile)
    try:
        response = upload(client, site, csv_bytes())
    finally:
        impatient.dispose()
    assert response.status_code == 201, response.text
    assert writes == ["written"]
    X, _ = load_design(uow_factory, response.json()["id"])
    np.testing.assert_allclose(X, expected_design()[0], rtol=0, atol=1e-15)


# ---- rejected uploads: precise problems, nothing stored, no values ---------------------------

NO_BOUNDS = [
    {"column": "age", "type": "numeric", "lower": 18},
    {"column": "color", "type": "categorical", "categories": ["red", "green", "blue"]},
]

#: (id, file bytes, spec, status, type slug, fragments of the detail (lower case))
REJECTED: list[tuple[str, bytes, dict[str, Any] | str, int, str, tuple[str, ...]]] = [
    (
        "numeric-without-bounds",
        csv_bytes(),
        base_spec(features=NO_BOUNDS),
        422,
        "invalid-dataset-spec",
        ("'age'", "bounds", "will not read bounds from the data", "private"),
    ),
    (
        "unknown-column",
        csv_bytes(),
        base_spec(
            features=[
                {"column": "age", "type": "numeric", "lower": 18, "upper": 90},
                {"column": "weight", "type": "numeric", "lower": 0, "upper": 200},
            ]
        ),
        422,
        "invalid-dataset-file",
        ("no column 'weight'",),
    ),
    (
        "unknown-label-column",
        csv_bytes(),
        base_spec(label={"column": "result", "positive": "yes"}),
        422,
        "invalid-dataset-file",
        ("no column 'result'",),
    ),
    (
        "label-without-positive-rows",
        csv_bytes([row.rsplit(",", 1)[0] + ",no" for row in ROWS]),
        base_spec(label={"column": "outcome", "positive": "approved", "negative": "no"}),
        422,
        "invalid-dataset-file",
        ("'outcome'", "no row equal to the positive class 'approved'"),
    ),
    (
        "empty-file",
        b"",
        base_spec(),
        422,
        "invalid-dataset-file",
        ("empty",),
    ),
    (
        "header-only",
        csv_bytes([]),
        base_spec(),
        422,
        "invalid-dataset-file",
        ("no data rows",),
    ),
    (
        "malformed-csv-field-count",
        csv_bytes([*ROWS, "p9,31337.5,red,3,yes,SECRET-7731,extra"]),
        base_spec(),
        422,
        "invalid-dataset-file",
        ("malformed csv", "7 fields", "header has 5"),
    ),
    (
        "text-in-numeric-column",
        csv_bytes([*ROWS, "p9,SECRET-7731,red,3,yes"]),
        base_spec(),
        422,
        "invalid-dataset-file",
        ("'age'", "not a number"),
    ),
    (
        "not-utf8",
        csv_bytes() + b"p9,20,\xff\xfeSECRET-7731,3,yes\n",
        base_spec(),
        422,
        "invalid-dataset-file",
        ("utf-8",),
    ),
    (
        "nan",
        csv_bytes([*ROWS, "p9,NaN,red,3,yes"]),
        base_spec(),
        422,
        "invalid-dataset-file",
        ("finite", "'age' (1 row)"),
    ),
    (
        "infinity",
        csv_bytes([*ROWS, "p9,20,red,inf,yes", "p10,20,red,-inf,no"]),
        base_spec(missing="drop"),
        422,
        "invalid-dataset-file",
        ("finite", "'income' (2 rows)"),
    ),
    (
        "corrupt-parquet",
        b"PAR1" + b"SECRET-7731" * 20,
        base_spec(),
        422,
        "invalid-dataset-file",
        ("parquet",),
    ),
    (
        "spec-not-json",
        csv_bytes(),
        "{'name': SECRET-7731",
        422,
        "invalid-dataset-spec",
        ("spec", "json"),
    ),
    (
        "spec-wrong-shape",
        csv_bytes(),
        json.dumps({"name": "toy", "label": {"column": "outcome"}, "features": []}),
        422,
        "invalid-dataset-spec",
        ("spec",),
    ),
    (
        "budget-over-server-maximum",
        csv_bytes(),
        base_spec(budget={"epsilon": 1000.0, "delta": 0.0}),
        422,
        "invalid-dataset-spec",
        ("epsilon", "maximum"),
    ),
]


@pytest.mark.parametrize(
    ("data", "spec", "status", "slug", "fragments"),
    [pytest.param(*case[1:], id=case[0]) for case in REJECTED],
)
def test_bad_upload_is_a_precise_problem_and_stores_nothing(
    data: bytes,
    spec: dict[str, Any] | str,
    status: int,
    slug: str,
    fragments: tuple[str, ...],
    client: TestClient,
    site: SiteHandle,
    engine: Engine,
) -> None:
    body = assert_problem(upload(client, site, data, spec), status, slug)
    detail = body["detail"].lower()
    for fragment in fragments:
        assert fragment.lower() in detail, (fragment, body["detail"])
    assert_nothing_stored(client, site, engine)


def test_missing_values_name_columns_and_counts(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    rows = [*ROWS, "p6,,red,3,yes", "p7,40,?,3,no", "p8,,NA,3,yes", "p9,40,red,3,"]
    body = assert_problem(upload(client, site, csv_bytes(rows)), 422, "missing-values")
    assert body["missing_columns"] == {"age": 2, "color": 2, "outcome": 1}
    assert body["missing_rows"] == 4
    assert "4 rows of 9 have missing values" in body["detail"]
    for column in ("'age' (2 rows)", "'color' (2 rows)", "'outcome' (1 row)"):
        assert column in body["detail"]
    assert '"missing": "drop"' in body["detail"]
    assert {e["loc"][1] for e in body["errors"]} == {"age", "color", "outcome"}
    assert_nothing_stored(client, site, engine)


def test_upload_over_the_size_limit_is_413(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    row = "SECRET-7731,30,red,200,yes"
    big = csv_bytes([row] * (1024 * 1024 // len(row) + 100))  # > 1 MiB, the test limit
    body = assert_problem(upload(client, site, big), 413, "payload-too-large")
    assert "1048576" in body["detail"]
    assert_nothing_stored(client, site, engine)


def test_upload_over_the_size_limit_without_content_length_is_413(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    boundary = "privfit-boundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="spec"\r\n\r\n'
        f"{json.dumps(base_spec())}\r\n"
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.csv"\r\n'
        "Content-Type: text/csv\r\n\r\n"
    ).encode()

    def chunked() -> Any:  # an iterator body: sent without Content-Length
        yield head + csv_bytes()
        for _ in range(20):
            yield b"SECRET-7731,30,red,200,yes\n" * 4000
        yield f"\r\n--{boundary}--\r\n".encode()

    response = client.post(
        "/v1/datasets",
        content=chunked(),
        headers={**site.headers, "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert_problem(response, 413, "payload-too-large")
    assert_nothing_stored(client, site, engine)


@pytest.mark.parametrize(
    ("kwargs", "status", "slug"),
    [
        pytest.param(
            {"json": base_spec()}, 415, "unsupported-media-type", id="json-instead-of-multipart"
        ),
        pytest.param(
            {"content": csv_bytes(), "headers": {"Content-Type": "text/csv"}},
            415,
            "unsupported-media-type",
            id="raw-csv",
        ),
        pytest.param(
            {"files": {"file": ("a.csv", csv_bytes(), "text/csv")}},
            422,
            "invalid-upload",
            id="no-spec-part",
        ),
        pytest.param(
            {"files": {"spec": (None, json.dumps(base_spec()))}},
            422,
            "invalid-upload",
            id="no-file-part",
        ),
        pytest.param(
            {
                "files": {
                    "file": ("a.csv", csv_bytes(), "text/csv"),
                    "spec": (None, json.dumps(base_spec())),
                    "extra": (None, "SECRET-7731"),
                }
            },
            422,
            "invalid-upload",
            id="unexpected-part",
        ),
    ],
)
def test_bad_multipart_framing(
    kwargs: dict[str, Any],
    status: int,
    slug: str,
    client: TestClient,
    site: SiteHandle,
    engine: Engine,
) -> None:
    headers = {**site.headers, **kwargs.pop("headers", {})}
    response = client.post("/v1/datasets", headers=headers, **kwargs)
    assert_problem(response, status, slug)
    assert_nothing_stored(client, site, engine)


def test_admin_cannot_upload_and_no_key_is_401(
    client: TestClient, admin_headers: dict[str, str], engine: Engine
) -> None:
    files: dict[str, tuple[str | None, bytes | str] | tuple[str | None, bytes | str, str]] = {
        "file": ("a.csv", csv_bytes(), "text/csv"),
        "spec": (None, json.dumps(base_spec())),
    }
    assert client.post("/v1/datasets", files=files, headers=admin_headers).status_code == 403
    assert client.post("/v1/datasets", files=files).status_code == 401
    assert stored_rows(engine) == (0, 0)


# ---- listing, reading, deleting ---------------------------------------------------------------


def test_list_and_get_are_per_site(
    client: TestClient, make_site: MakeSite, admin_headers: dict[str, str]
) -> None:
    alice, bob = make_site(), make_site()
    first = upload(client, alice, csv_bytes(), base_spec(name="first")).json()
    second = upload(client, alice, parquet_bytes(), base_spec(name="second")).json()
    theirs = upload(client, bob, csv_bytes(), base_spec(name="bobs")).json()

    listed = client.get("/v1/datasets", headers=alice.headers).json()
    assert listed["total"] == 2
    assert [d["id"] for d in listed["items"]] == [second["id"], first["id"]]  # newest first
    page = client.get("/v1/datasets?limit=1&offset=1", headers=alice.headers).json()
    assert [d["id"] for d in page["items"]] == [first["id"]]
    assert page["total"] == 2

    assert client.get(f"/v1/datasets/{first['id']}", headers=alice.headers).json() == first
    for path in (f"/v1/datasets/{theirs['id']}", f"/v1/datasets/{theirs['id']}/budget"):
        assert_problem(client.get(path, headers=alice.headers), 404, "not-found")
    assert_problem(
        client.delete(f"/v1/datasets/{theirs['id']}", headers=alice.headers), 404, "not-found"
    )
    assert_problem(client.get(f"/v1/datasets/{'0' * 32}", headers=alice.headers), 404, "not-found")
    # the admin key reaches no site's datasets: the list is a 403, a dataset a 404
    assert_problem(client.get("/v1/datasets", headers=admin_headers), 403, "permission-denied")
    assert_problem(
        client.get(f"/v1/datasets/{first['id']}", headers=admin_headers), 404, "not-found"
    )


def test_delete_removes_content_and_keeps_the_ledger(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory, engine: Engine
) -> None:
    dataset = upload(client, site, csv_bytes()).json()
    fit = {"mechanism": "output_perturbation", "epsilon": 0.25, "regularization": 0.1}
    posted = client.post(f"/v1/datasets/{dataset['id']}/fits", json=fit, headers=site.headers)
    assert posted.status_code == 202, posted.text
    assert wait_for_job(client, site, posted.json()["id"])["status"] == "succeeded"
    assert stored_rows(engine)[1] >= 1

    assert client.delete(f"/v1/datasets/{dataset['id']}", headers=site.headers).status_code == 204

    assert stored_rows(engine) == (1, 0)  # the row stays, the content is gone
    with pytest.raises(DatasetDeletedError):
        load_design(uow_factory, dataset["id"])
    got = client.get(f"/v1/datasets/{dataset['id']}", headers=site.headers)
    assert got.status_code == 200
    assert got.json()["deleted_at"] is not None
    assert client.get("/v1/datasets", headers=site.headers).json()["total"] == 0
    listed = client.get("/v1/datasets?include_deleted=true", headers=site.headers).json()
    assert [d["id"] for d in listed["items"]] == [dataset["id"]]

    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=site.headers)
    assert budget.status_code == 200
    assert budget.json()["epsilon_spent"] == 0.25
    assert [c["job_id"] for c in budget.json()["charges"]] == [posted.json()["id"]]

    refused = client.post(f"/v1/datasets/{dataset['id']}/fits", json=fit, headers=site.headers)
    body = assert_problem(refused, 409, "dataset-deleted")
    assert "deleted" in body["detail"]
    after = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=site.headers).json()
    assert after == budget.json()  # nothing charged by the refused fit

    # Deleting again is a no-op.
    assert client.delete(f"/v1/datasets/{dataset['id']}", headers=site.headers).status_code == 204
    assert stored_rows(engine) == (1, 0)


def test_model_of_a_deleted_dataset_still_works(client: TestClient, site: SiteHandle) -> None:
    dataset = upload(client, site, csv_bytes()).json()
    fit = {"mechanism": "output_perturbation", "epsilon": 0.5, "regularization": 0.1}
    posted = client.post(f"/v1/datasets/{dataset['id']}/fits", json=fit, headers=site.headers)
    job = wait_for_job(client, site, posted.json()["id"])
    assert job["status"] == "succeeded"
    assert client.delete(f"/v1/datasets/{dataset['id']}", headers=site.headers).status_code == 204
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers)
    assert model.status_code == 200
    row = {"age": 40, "color": "green", "income": 100}
    predicted = client.post(
        f"/v1/models/{job['model_id']}/predict", json={"rows": [row]}, headers=site.headers
    )
    assert predicted.status_code == 200, predicted.text
    assert math.isfinite(predicted.json()["predictions"][0]["score"])
