"""Random projection: deterministic public matrix from a seed, JL property, re-clipping, folding."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from service.dp.data.projection import MAX_SEED, RandomProjection, clip_rows, jl_dimension


def test_matrix_is_a_deterministic_function_of_the_public_parameters() -> None:
    a = RandomProjection(d_in=30, k=7, seed=12345)
    b = RandomProjection(d_in=30, k=7, seed=12345)
    c = RandomProjection(d_in=30, k=7, seed=12346)
    assert a.matrix.shape == (7, 30)
    np.testing.assert_array_equal(a.matrix, b.matrix)
    assert not np.array_equal(a.matrix, c.matrix)
    assert not a.matrix.flags.writeable


def test_gaussian_entries_have_variance_one_over_k() -> None:
    k = 50
    R = RandomProjection(d_in=2000, k=k, seed=7).matrix
    assert abs(R.mean()) < 4 * np.sqrt(1 / k / R.size)
    assert R.var() == pytest.approx(1.0 / k, rel=0.03)


def test_achlioptas_entries_are_sparse_signs_scaled_by_sqrt_3_over_k() -> None:
    k = 40
    R = RandomProjection(d_in=3000, k=k, seed=3, kind="achlioptas").matrix
    scale = np.sqrt(3.0 / k)
    values = set(np.unique(np.round(R / scale, 12)).tolist())
    assert values == {-1.0, 0.0, 1.0}
    frac_zero = float(np.mean(R == 0.0))
    frac_pos = float(np.mean(R > 0.0))
    assert frac_zero == pytest.approx(2 / 3, abs=0.01)
    assert frac_pos == pytest.approx(1 / 6, abs=0.01)
    assert R.var() == pytest.approx(1.0 / k, rel=0.03)


@pytest.mark.parametrize("kind", ["gaussian", "achlioptas"])
def test_johnson_lindenstrauss_preserves_pairwise_distances(kind: str) -> None:
    m, d, eta = 40, 1000, 0.5
    k = jl_dimension(m, eta)
    assert k < d
    pts = np.random.default_rng(0).standard_normal((m, d))
    P = RandomProjection(d_in=d, k=k, seed=2024, kind=kind)  # type: ignore[arg-type]
    Q = P.project(pts)
    i, j = np.triu_indices(m, 1)
    orig = np.sum((pts[i] - pts[j]) ** 2, axis=1)
    proj = np.sum((Q[i] - Q[j]) ** 2, axis=1)
    ratio = proj / orig
    assert ratio.min() > 1 - eta
    assert ratio.max() < 1 + eta


def test_projection_is_norm_preserving_in_expectation() -> None:
    x = np.random.default_rng(1).standard_normal(60)
    x /= np.linalg.norm(x)
    sq = [
        float(np.sum(RandomProjection(d_in=60, k=10, seed=s).project(x[None, :]) ** 2))
        for s in range(400)
    ]
    # ‖Rx‖² ~ χ²_k / k for Gaussian R: mean 1, sd √(2/k); the mean of 400 has sd ≈ 0.022
    assert np.mean(sq) == pytest.approx(1.0, abs=0.09)


def test_apply_reclips_rows_to_the_unit_ball() -> None:
    rng = np.random.default_rng(5)
    X = rng.standard_normal((500, 20))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    P = RandomProjection(d_in=20, k=3, seed=9)
    raw = P.project(X)
    assert np.max(np.linalg.norm(raw, axis=1)) > 1.0  # the projection does lengthen some rows
    out = P.apply(X)
    norms = np.linalg.norm(out, axis=1)
    assert np.all(norms <= 1.0)
    short = np.linalg.norm(raw, axis=1) <= 1.0
    np.testing.assert_array_equal(out[short], raw[short])


def test_fold_gives_the_same_scores_in_the_original_space() -> None:
    rng = np.random.default_rng(11)
    P = RandomProjection(d_in=25, k=6, seed=77)
    X = rng.standard_normal((50, 25))
    w = rng.standard_normal(6)
    np.testing.assert_allclose(X @ P.fold(w), P.project(X) @ w, rtol=1e-12, atol=1e-12)


def test_round_trip_through_json() -> None:
    P = RandomProjection(d_in=12, k=4, seed=MAX_SEED, kind="achlioptas")
    again = RandomProjection.from_dict(json.loads(json.dumps(P.to_dict())))
    assert again == P
    np.testing.assert_array_equal(again.matrix, P.matrix)


def test_create_draws_a_fresh_seed_and_is_reproducible_with_a_test_rng() -> None:
    a = RandomProjection.create(10, 3)
    b = RandomProjection.create(10, 3)
    assert 0 <= a.seed <= MAX_SEED
    assert a.seed != b.seed  # two 53-bit CSPRNG draws collide with probability 2^-53
    c = RandomProjection.create(10, 3, rng=np.random.default_rng(4))
    d = RandomProjection.create(10, 3, rng=np.random.default_rng(4))
    assert c == d


@pytest.mark.parametrize(
    "kwargs",
    [
        {"d_in": 0, "k": 2, "seed": 1},
        {"d_in": 3, "k": 0, "seed": 1},
        {"d_in": 3, "k": 2, "seed": -1},
        {"d_in": 3, "k": 2, "seed": MAX_SEED + 1},
        {"d_in": 3, "k": 2, "seed": True},
        {"d_in": 3.0, "k": 2, "seed": 1},
        {"d_in": 3, "k": 2, "seed": 1, "kind": "fourier"},
    ],
)
def test_invalid_projections_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RandomProjection(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        {"d_in": 3, "k": 2},
        {"d_in": 3, "k": 2, "seed": 1, "extra": 0},
        {"d_in": 3, "k": 2, "seed": 1, "kind": "sparse"},
        [3, 2, 1],
    ],
)
def test_from_dict_rejects_malformed_input(data: object) -> None:
    with pytest.raises(ValueError):
        RandomProjection.from_dict(data)  # type: ignore[arg-type]


def test_project_checks_the_input_width() -> None:
    with pytest.raises(ValueError, match="length 5"):
        RandomProjection(d_in=5, k=2, seed=0).project(np.zeros((3, 4)))


def test_jl_dimension_matches_the_dasgupta_gupta_bound() -> None:
    # 4 ln(1000) / (0.1²/2 − 0.1³/3) = 27.631 / 0.0046667 = 5920.9 → 5921
    assert jl_dimension(1000, 0.1) == 5921
    with pytest.raises(ValueError):
        jl_dimension(1, 0.1)
    with pytest.raises(ValueError):
        jl_dimension(10, 1.5)


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=8),
        elements=st.floats(-1e6, 1e6, allow_nan=False, width=64),
    )
)
def test_clip_rows_never_leaves_a_norm_above_one(X: np.ndarray) -> None:
    out = clip_rows(X)
    assert np.all(np.einsum("ij,ij->i", out, out) <= 1.0)
    inside = np.einsum("ij,ij->i", X, X) <= 1.0
    np.testing.assert_array_equal(out[inside], X[inside])
    # direction is kept for the clipped rows
    over = ~inside
    if np.any(over):
        cos = np.einsum("ij,ij->i", out[over], X[over]) / (
            np.linalg.norm(out[over], axis=1) * np.linalg.norm(X[over], axis=1)
        )
        np.testing.assert_allclose(cos, 1.0, rtol=1e-9)
