"""The vendored UCI Adult copy (datasets/adult) loads as published and matches its public spec."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
ADULT = ROOT / "datasets" / "adult"

SHA256 = {
    "adult.data.gz": "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
    "adult.test.gz": "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
}


def _load_module() -> ModuleType:
    """Import benchmarks/adult.py by path (benchmarks/ is not an installed package)."""
    name = "benchmarks.adult"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "adult.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def adult() -> ModuleType:
    return _load_module()


@pytest.fixture(scope="module")
def raw(adult: ModuleType) -> dict[str, dict[str, np.ndarray]]:
    return {split: adult.load_adult(split) for split in ("train", "test")}


@pytest.mark.parametrize(("name", "digest"), sorted(SHA256.items()))
def test_vendored_files_are_the_published_bytes(name: str, digest: str) -> None:
    with gzip.open(ADULT / name, "rb") as fh:
        assert hashlib.sha256(fh.read()).hexdigest() == digest


@pytest.mark.parametrize(
    ("split", "rows", "complete"), [("train", 32561, 30162), ("test", 16281, 15060)]
)
def test_row_counts_match_adult_names(
    adult: ModuleType, raw: dict[str, dict[str, np.ndarray]], split: str, rows: int, complete: int
) -> None:
    cols = raw[split]
    assert list(cols) == list(adult.COLUMNS)
    assert all(len(v) == rows for v in cols.values())
    keep = np.ones(rows, dtype=bool)
    for name, values in cols.items():
        if name in adult.NUMERIC_COLUMNS:
            assert values.dtype == np.float64
            keep &= ~np.isnan(values)
        else:
            keep &= np.array([v is not None for v in values])
    assert int(keep.sum()) == complete


@pytest.mark.parametrize("split", ["train", "test"])
def test_labels_are_normalised(raw: dict[str, dict[str, np.ndarray]], split: str) -> None:
    assert set(raw[split]["income"]) == {">50K", "<=50K"}


def test_spec_is_public_and_complete(adult: ModuleType) -> None:
    spec = adult.load_spec()
    assert spec["name"] == "adult"
    assert spec["label"] == {"column": "income", "positive": ">50K", "negative": "<=50K"}
    assert spec["missing"] == "drop"
    assert spec["allow_non_private"] is False
    assert spec["budget"]["epsilon"] > 0
    assert 0 <= spec["budget"]["delta"] < 1
    columns = [f["column"] for f in spec["features"]]
    assert columns == [c for c in adult.COLUMNS if c != "income"]
    for f in spec["features"]:
        if f["column"] in adult.NUMERIC_COLUMNS:
            assert f["type"] == "numeric"
            assert np.isfinite(f["lower"])
            assert np.isfinite(f["upper"])
            assert f["lower"] < f["upper"], f["column"]
        else:
            assert f["type"] == "categorical"
            assert len(f["categories"]) == len(set(f["categories"])) > 1, f["column"]


def test_the_non_private_variant_differs_only_in_name_and_flag(adult: ModuleType) -> None:
    dp_only = adult.load_spec()
    variant = adult.load_spec(non_private=True)
    assert variant["allow_non_private"] is True
    assert variant["name"] == "adult-non-private"
    same = {k: v for k, v in variant.items() if k not in ("name", "allow_non_private")}
    assert same == {k: v for k, v in dp_only.items() if k not in ("name", "allow_non_private")}


@pytest.mark.parametrize("split", ["train", "test"])
def test_spec_categories_cover_the_data(
    adult: ModuleType, raw: dict[str, dict[str, np.ndarray]], split: str
) -> None:
    for f in adult.load_spec()["features"]:
        if f["type"] != "categorical":
            continue
        seen = {v for v in raw[split][f["column"]] if v is not None}
        assert "?" not in seen
        assert seen <= set(f["categories"]), (f["column"], sorted(seen - set(f["categories"])))


@pytest.mark.parametrize(("split", "rows"), [("train", 30162), ("test", 15060)])
def test_design_matrix(adult: ModuleType, split: str, rows: int) -> None:
    X, y, names = adult.design(split)
    spec = adult.load_spec()
    expected_d = 1 + sum(
        1 if f["type"] == "numeric" else len(f["categories"]) for f in spec["features"]
    )
    assert expected_d == 106
    assert X.shape == (rows, expected_d)
    assert len(names) == expected_d
    assert np.all(np.isfinite(X))
    assert np.all(np.linalg.norm(X, axis=1) <= 1.0 + 1e-12)
    assert set(np.unique(y)) == {-1.0, 1.0}
