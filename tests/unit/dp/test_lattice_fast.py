"""The fast path of service.dp.noise.lattice: its error bounds hold (against 60-digit decimal
arithmetic), it returns the cells the decimal path returns on the same uniforms, and the
blocks release each noise vector once."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

from service.dp.noise import lattice, rounding
from service.dp.noise.lattice import fast

GAMMA = 2.0**-32


def _decimal_ln(x: float) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 60
        return Decimal(x).ln()


def test_the_ln2_split_and_the_mantissa_threshold() -> None:
    with localcontext() as ctx:
        ctx.prec = 60
        split = Decimal(fast.LN2_HI) + Decimal(fast.LN2_LO)
        assert abs(split - Decimal(2).ln()) <= Decimal(2) ** -86
        assert (fast.LN2_HI * 2.0**32).is_integer()  # 32 bits: e·LN2_HI is exact
        assert Decimal(fast._SQRT_HALF) > Decimal(1) / Decimal(2).sqrt()
        assert Decimal(fast._SQRT_HALF) - Decimal(1) / Decimal(2).sqrt() < Decimal(2) ** -53


def test_the_logarithm_stays_within_its_bound() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            rng.random(4000),
            1.0 - rng.random(500) * 1e-9,  # near 1: ln x ≈ x − 1, the relative bound matters
            fast._SQRT_HALF * (1.0 + (rng.random(500) - 0.5) * 1e-12),  # the mantissa switch
            rng.random(500) * 2.0**-40,
            np.exp(-rng.random(500) * 700.0),
            [1.0, 0.5, 2.0**-64, 2.0**-1000, np.nextafter(1.0, 0.0)],
        ]
    )
    x = x[x > 0.0]
    values, bounds = fast._ln(x)
    worst = 0.0
    for xi, li, bi in zip(x.tolist(), values.tolist(), bounds.tolist(), strict=True):
        error = abs(Decimal(li) - _decimal_ln(xi))
        assert error <= Decimal(bi), xi
        if bi > 0.0:  # ln 1 = 0 is exact, with bound 0
            worst = max(worst, float(error / Decimal(bi)))
    # the bound is not absurdly loose either (it decides how often the decimal path runs)
    assert worst > 0.05


def test_row_sums_stay_within_their_bounds() -> None:
    rng = np.random.default_rng(1)
    for count in (3, 200):  # math.fsum rows, and the vectorised Sum2
        terms = rng.standard_normal((count, 106)) * np.exp(rng.standard_normal((count, 106)) * 8)
        sums, errors = rounding.compensated_row_sums(terms)
        for row, s, e in zip(terms.tolist(), sums.tolist(), errors.tolist(), strict=True):
            exact = sum((Fraction(v) for v in row), Fraction(0))
            assert abs(Fraction(s) - exact) <= Fraction(e)


@pytest.mark.parametrize(
    ("dim", "beta", "scale"),
    [(106, 25.0, 0.3), (10, 1.0, 3.0), (1, 0.35 / GAMMA, GAMMA), (3, 0.5, 1e5)],
)
def test_norm_exponential_fast_cells_are_the_exact_cells(
    dim: int, beta: float, scale: float
) -> None:
    block = lattice.NormExponentialBlock(150, dim, beta=beta, rng=np.random.default_rng(dim))
    decided_any = 0
    for j in range(150):
        centre = np.random.default_rng(j).standard_normal(dim) * scale
        cells, decided = fast._fast_cells(centre, block._y[j], block._bound[j])
        exact = block._exact(j, centre)
        np.testing.assert_array_equal((cells * GAMMA)[decided], exact[decided])
        decided_any += int(decided.all())
    assert decided_any >= 140  # the fast path decides nearly every vector


@pytest.mark.parametrize(("dim", "sigma"), [(106, 141.0), (6, 1.0), (5, 3 * GAMMA), (2, 1e-3)])
def test_gaussian_fast_cells_are_the_exact_cells(dim: int, sigma: float) -> None:
    block = lattice.GaussianBlock(150, dim, sigma=sigma, rng=np.random.default_rng(dim))
    undecided = 0
    for j in range(150):
        centre = np.random.default_rng(j).standard_normal(dim) * 50.0
        cells, decided = fast._fast_cells(centre, block._y[j], block._bound[j])
        exact = block._exact(j, centre)
        np.testing.assert_array_equal((cells * GAMMA)[decided], exact[decided])
        undecided += int((~decided).sum())
        # and release() (fast where decided, decimal per coordinate elsewhere) agrees
        np.testing.assert_array_equal(block.release(j, centre), exact)
    assert undecided <= 0.01 * 150 * dim


def test_coordinates_near_a_cell_boundary_go_to_the_decimal_path() -> None:
    # put the centre so that centre/γ + ŷ sits exactly on a boundary k + ½ (as computed): the
    # enclosure cannot decide it, and release() still returns the exact cell
    block = lattice.GaussianBlock(20, 4, sigma=1e-6, rng=np.random.default_rng(8))
    for j in range(20):
        y = block._y[j]
        centre = (0.5 - (y - np.floor(y))) * GAMMA  # ŷ + centre/γ ≈ an integer + ½
        _, decided = fast._fast_cells(centre, y, block._bound[j])
        assert not decided.any()
        np.testing.assert_array_equal(block.release(j, centre), block._exact(j, centre))


def test_thirty_two_bit_first_draws_still_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("service.dp.noise.lattice.exact._FIRST_WORDS", 1)
    block = lattice.NormExponentialBlock(50, 4, beta=2.0**20, rng=np.random.default_rng(2))
    for j in range(50):
        centre = np.full(4, 0.1)
        cells, decided = fast._fast_cells(centre, block._y[j], block._bound[j])
        np.testing.assert_array_equal((cells * GAMMA)[decided], block._exact(j, centre)[decided])


def test_seeded_blocks_are_reproducible_and_each_vector_is_used_once() -> None:
    a = lattice.NormExponentialBlock(5, 7, beta=3.0, rng=np.random.default_rng(4))
    b = lattice.NormExponentialBlock(5, 7, beta=3.0, rng=np.random.default_rng(4))
    centre = np.linspace(-1.0, 1.0, 7)
    for j in range(5):
        np.testing.assert_array_equal(a.release(j, centre), b.release(j, centre))
    with pytest.raises(RuntimeError, match="once"):
        a.release(2, centre)
    with pytest.raises(ValueError, match="coordinates"):
        b.release(0, np.zeros(3))


def test_large_centres_take_the_decimal_path_and_clamp() -> None:
    out = lattice.norm_exponential_release(np.array([1e30, 3.0 * 2.0**20]), beta=1.0)
    assert out[0] == 2.0**20
    assert math.isfinite(out[1])
    assert out[1] * 2.0**32 == round(out[1] * 2.0**32)
