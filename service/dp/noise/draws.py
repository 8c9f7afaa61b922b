"""Uniform draws for PrivFit's randomised choices, and the release grid.

Every noisy value PrivFit releases is an exact lattice point drawn by
:mod:`service.dp.noise.lattice`
from its own random bits (docs/privacy.md, "Floating point"); no float sampler takes part in a
release (the float samplers of earlier versions live on only in ``benchmarks/float_samplers.py``,
as the baseline the exact samplers are timed against). What stays here:

* :func:`uniforms`, uniforms on (0, 1) for the data shuffles of DP-SGD and stacking and the
  acceptance tests of private selection: with ``rng=None`` from the operating system's CSPRNG
  (``os.urandom``), 52 random bits each, offset by half a unit so that 0 and 1 never occur;
  with a ``numpy.random.Generator`` (tests, or a server in explicit test mode) from
  ``rng.random``;
* :func:`round_to_grid`, the release grid 2⁻³² of values that are public already.
"""

from __future__ import annotations

import os

import numpy as np
from numpy.typing import NDArray

__all__ = ["RELEASE_GRID", "round_to_grid", "uniforms"]

#: Released weights are rounded to multiples of 2^-32 so low-order bits carry no noise trace.
RELEASE_GRID = 2.0**-32

#: Bits per CSPRNG uniform. With 52 bits, k + 0.5 (k < 2^52) needs 53 significant bits and is
#: exact in float64, so (k + 0.5)·2^-52 spans [2^-53, 1 − 2^-53] with no rounding; with 53 bits
#: the largest k would round k + 0.5 up to 2^53 and return exactly 1.
_CSPRNG_BITS = 52
#: Resolution of ``Generator.random`` (multiples of 2^-53 in [0, 1)).
_GENERATOR_BITS = 53


def uniforms(
    size: int | tuple[int, ...], rng: np.random.Generator | None = None
) -> NDArray[np.float64]:
    """Uniform draws on the open interval (0, 1).

    ``rng=None`` reads 8 bytes per draw from ``os.urandom`` and keeps the top 52 bits, giving
    ``(k + 0.5) / 2^52`` for a uniform integer ``0 ≤ k < 2^52``; the half offset keeps 0 and 1
    out so the inverse CDFs below stay finite. With a generator, ``rng.random`` is used and an
    exact 0 (probability 2^-53) is moved to 2^-53.
    """
    shape = (size,) if isinstance(size, int) else tuple(size)
    count = int(np.prod(shape, dtype=np.int64))
    if rng is None:
        raw = np.frombuffer(os.urandom(8 * count), dtype=np.uint64)
        ints = raw >> np.uint64(64 - _CSPRNG_BITS)
        out = (ints.astype(np.float64) + 0.5) * (2.0**-_CSPRNG_BITS)
        return out.reshape(shape)
    u = rng.random(shape)
    # Generator.random lies in [0, 1); move an exact 0 to the smallest positive grid point.
    return np.where(u > 0.0, u, 2.0**-_GENERATOR_BITS)


def round_to_grid(values: NDArray[np.float64], grid: float = RELEASE_GRID) -> NDArray[np.float64]:
    """Round released values to the nearest multiple of ``grid`` (default 2^-32)."""
    return np.round(np.asarray(values, dtype=np.float64) / grid) * grid
